/*
 * tests/unit/test_spec_loop.c: the drafters of runtime/engine/mtp.h and
 * draft_model.h wired into a speculative greedy loop on one engine, the
 * way the pipeline is meant to use them (issue 38): each step runs the
 * last accepted id plus the drafts as rows of one batch, keeps a draft
 * where it equals the target's own choice, then the target's next choice;
 * the MTP drafter is pushed the kept rows' final hidden states. The tokens
 * must be exactly those of a plain greedy run, and the drafters must have
 * been asked and (the draft model) have had drafts accepted.
 *
 * Part: tests of runtime/ (engine).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/draft_model.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/mtp.h"
#include "tests/unit/test.h"
#include "tests/unit/test_fixture.h"

#define FX_DS2                                                                                     \
	"--arch deepseek2 --type F32 --layers 3 --dim 128 --ff 256 --heads 4 --vocab 300 "         \
	"--head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 --dense-lead 1 --shared 1 "      \
	"--experts 8 --experts-used 2 --ff-exp 64 --ctx 64 --seed 13 --nextn 1 --q-lora 64"
#define FX_LLAMA                                                                                   \
	"--arch llama --type F32 --layers 3 --dim 128 --ff 256 --heads 4 --kv-heads 2 "            \
	"--vocab 300 --ctx 64 --seed 23"

static const int32_t PROMPT[] = {1, 40, 41, 200, 7, 7, 123, 9};
#define NP   ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))
#define NGEN 24u
#define KMAX 4u
#define ROWS 16u

typedef struct loop_out {
	int32_t ids[NP + NGEN + KMAX + 1];
	uint32_t n, n_all, proposed, accepted, steps; /* n_all: n before the cut */
} loop_out;

static shoal_engine *main_engine(const shoal_model *m, uint32_t *slot)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = ROWS;
	shoal_engine *e = NULL;
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_engine_session_open(e, slot)) {
		fprintf(stderr, "engine: %s\n", why);
		shoal_engine_free(e);
		return NULL;
	}
	return e;
}

/* Greedy decoding of NGEN tokens after the prompt; with a drafter d (k
 * drafts a step at most), speculatively; an MTP drafter push (may be d)
 * is pushed the kept rows. */
static int run_loop(const shoal_model *m, shoal_drafter *d, uint32_t k, shoal_drafter *push,
                    loop_out *o)
{
	char why[SHOAL_WHY_LEN] = "";
	const uint32_t E = m->hp.n_embd, V = m->hp.n_vocab;
	uint32_t slot, pos[ROWS], sess[ROWS];
	uint8_t want[ROWS];
	int32_t rows[ROWS], next[ROWS];
	float *h = malloc((size_t)ROWS * E * sizeof *h),
	      *lg = malloc((size_t)ROWS * V * sizeof *lg);
	shoal_engine *e = main_engine(m, &slot);
	int rc = -1;
	memset(o, 0, sizeof *o);
	memcpy(o->ids, PROMPT, sizeof PROMPT);
	o->n = NP;
	/* the prompt: the first step's rows */
	uint32_t first = 0, n_rows = NP;
	memcpy(rows, PROMPT, sizeof PROMPT);
	while (e && o->n < NP + NGEN) {
		for (uint32_t r = 0; r < n_rows; r++) {
			pos[r] = first + r;
			sess[r] = slot;
			want[r] = first + r >= o->n - 1; /* the last history row and drafts */
		}
		uint32_t n_want = first + n_rows - (o->n - 1);
		shoal_engine_batch b = {.n_rows = n_rows,
		                        .tokens = rows,
		                        .session = sess,
		                        .pos = pos,
		                        .want_logits = want,
		                        .logits = lg,
		                        .hidden_out = h};
		if (shoal_engine_run(e, &b, why, sizeof why))
			goto out;
		/* keep drafts while they are the target's choice, then its own */
		uint32_t a = 0, n_drafts = n_want - 1;
		while (a < n_drafts && rows[n_rows - n_drafts + a] == argmax(lg + (size_t)a * V, V))
			a++;
		int32_t own = argmax(lg + (size_t)a * V, V);
		if (d && n_drafts)
			d->ops->feedback(d->self, n_drafts, a);
		o->accepted += a;
		o->steps++;
		/* kept rows: all but the rejected drafts; row r's next id */
		uint32_t kept = n_rows - (n_drafts - a);
		for (uint32_t r = 0; r + 1 < kept; r++)
			next[r] = rows[r + 1];
		next[kept - 1] = own;
		if (push && shoal_mtp_drafter_push(push, first, kept, h, next, why, sizeof why))
			goto out;
		for (uint32_t r = 1; r < kept; r++)
			o->ids[first + r] = rows[r];
		o->n = first + kept + 1;
		o->ids[o->n - 1] = own;
		/* the next step: the new id, then up to k drafts */
		first = o->n - 1;
		rows[0] = own;
		n_rows = 1;
		if (d && o->n < NP + NGEN) {
			size_t got = d->ops->propose(d->self, o->ids, o->n, rows + 1, k);
			o->proposed += (uint32_t)got;
			n_rows += (uint32_t)got;
		}
	}
	rc = e ? 0 : -1;
out:
	if (rc)
		fprintf(stderr, "loop: %s\n", why);
	o->n_all = o->n;
	if (o->n > NP + NGEN)
		o->n = NP + NGEN;
	shoal_engine_free(e);
	free(h);
	free(lg);
	return rc;
}

/* An oracle drafter: on every other step, the plain run's next 1..k ids,
 * the last of them wrong where n is a multiple of 3. */
static const loop_out *oracle_of;

static size_t oracle_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	(void)self;
	(void)hist;
	size_t got = 0;
	while (n % 2 == 0 && got < k && n + got < oracle_of->n) {
		out[got] = oracle_of->ids[n + got];
		got++;
	}
	if (n % 3 == 0 && got >= 2) /* then a wrong last one: partly accepted */
		out[got - 1] = (out[got - 1] + 1) % 300;
	return got;
}

static void oracle_feedback(void *self, size_t proposed, size_t accepted)
{
	(void)self;
	(void)proposed;
	(void)accepted;
}

static void oracle_free(void *self)
{
	(void)self;
}

static const shoal_drafter_ops oracle_ops = {
    .name = "oracle", .propose = oracle_propose, .feedback = oracle_feedback, .free = oracle_free};

/* The guess of a fresh MTP drafter of t pushed the hidden states of
 * ids[0, n - 1) from one prefill (in chunks). */
static int fresh_guess(const shoal_model *m, shoal_mtp *t, const int32_t *ids, uint32_t n,
                       int32_t *guess)
{
	char why[SHOAL_WHY_LEN] = "";
	const uint32_t E = m->hp.n_embd;
	uint32_t slot, pos[ROWS], sess[ROWS];
	float *h = malloc((size_t)n * E * sizeof *h);
	shoal_engine *e = main_engine(m, &slot);
	shoal_drafter d = {0};
	int rc = -1;
	for (uint32_t p = 0; e && p < n - 1; p += ROWS) {
		uint32_t c = n - 1 - p < ROWS ? n - 1 - p : ROWS;
		for (uint32_t r = 0; r < c; r++) {
			pos[r] = p + r;
			sess[r] = slot;
		}
		shoal_engine_batch b = {.n_rows = c,
		                        .tokens = ids + p,
		                        .session = sess,
		                        .pos = pos,
		                        .hidden_out = h + (size_t)p * E};
		if (shoal_engine_run(e, &b, why, sizeof why))
			goto out;
	}
	if (e && !shoal_mtp_drafter_new(t, &d, why, sizeof why) &&
	    !shoal_mtp_drafter_push(&d, 0, n - 1, h, ids + 1, why, sizeof why) &&
	    d.ops->propose(d.self, ids, n, guess, 1) == 1)
		rc = 0;
out:
	if (rc)
		fprintf(stderr, "fresh: %s\n", why);
	if (d.ops)
		d.ops->free(d.self);
	shoal_engine_free(e);
	free(h);
	return rc;
}

static void test_mtp_loop(void)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = open_model(fx_path("ds2-mtp", FX_DS2));
	ASSERT_TRUE(m != NULL);
	loop_out plain, spec;
	ASSERT_EQ(run_loop(m, NULL, 0, NULL, &plain), 0);
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = ROWS;
	shoal_mtp *t = NULL;
	ASSERT_EQ(shoal_mtp_new(m, &c, &t, why, sizeof why), SHOAL_OK);
	shoal_drafter d;
	ASSERT_EQ(shoal_mtp_drafter_new(t, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(run_loop(m, &d, 1, &d, &spec), 0);
	printf("  mtp: %u of %u drafts accepted in %u steps (random weights)\n", spec.accepted,
	       spec.proposed, spec.steps);
	ASSERT_EQ(spec.n, plain.n);
	ASSERT_MEM_EQ(spec.ids, plain.ids, plain.n * sizeof(int32_t));
	ASSERT_EQ(spec.proposed, spec.steps - 1); /* a guess after every step */
	d.ops->free(d.self);

	/* drafts the target keeps (an oracle's, every other step), so that
	 * pushes carry several rows: afterwards the MTP drafter guesses what
	 * a fresh one pushed the whole history at once does */
	oracle_of = &plain;
	shoal_drafter orc = {.ops = &oracle_ops, .self = NULL};
	ASSERT_EQ(shoal_mtp_drafter_new(t, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(run_loop(m, &orc, 3, &d, &spec), 0);
	printf("  oracle drafts, MTP pushes: %u of %u accepted in %u steps\n", spec.accepted,
	       spec.proposed, spec.steps);
	ASSERT_MEM_EQ(spec.ids, plain.ids, plain.n * sizeof(int32_t));
	ASSERT_GT(spec.accepted, 4);
	ASSERT_LT(spec.accepted, spec.proposed);
	int32_t g1 = -1, g2 = -2;
	ASSERT_EQ(d.ops->propose(d.self, spec.ids, spec.n_all, &g1, 1), 1);
	d.ops->free(d.self);
	ASSERT_EQ(fresh_guess(m, t, spec.ids, spec.n_all, &g2), 0);
	ASSERT_EQ(g1, g2);
	shoal_mtp_free(t);
	shoal_model_free(m);
}

static void test_draft_model_loop(void)
{
	char why[SHOAL_WHY_LEN] = "";
	const char *target = fx_path("llama", FX_LLAMA);
	shoal_model *m = open_model(target);
	ASSERT_TRUE(m != NULL);
	loop_out plain, spec;
	ASSERT_EQ(run_loop(m, NULL, 0, NULL, &plain), 0);
	/* the target itself as its draft: every draft is accepted */
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = ROWS;
	shoal_drafter d;
	shoal_draft_model *dm = NULL;
	ASSERT_EQ(shoal_draft_model_open(target, m, &c, &dm, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(run_loop(m, &d, KMAX, NULL, &spec), 0);
	printf("  draft (the target): %u of %u accepted in %u steps\n", spec.accepted,
	       spec.proposed, spec.steps);
	ASSERT_MEM_EQ(spec.ids, plain.ids, plain.n * sizeof(int32_t));
	ASSERT_EQ(spec.accepted, spec.proposed);
	ASSERT_GT(spec.proposed, NGEN / 2);
	d.ops->free(d.self);
	shoal_draft_model_free(dm);
	/* another model of the same vocabulary: drafts mostly rejected */
	const char *other =
	    fx_path("llama-other", "--arch llama --type F32 --layers 1 --dim 64 "
	                           "--ff 128 --heads 2 --vocab 300 --ctx 64 --seed 5");
	ASSERT_EQ(shoal_draft_model_open(other, m, &c, &dm, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(run_loop(m, &d, KMAX, NULL, &spec), 0);
	printf("  draft (another model): %u of %u accepted in %u steps\n", spec.accepted,
	       spec.proposed, spec.steps);
	ASSERT_MEM_EQ(spec.ids, plain.ids, plain.n * sizeof(int32_t));
	ASSERT_LT(spec.accepted, spec.proposed);
	d.ops->free(d.self);
	shoal_draft_model_free(dm);
	shoal_model_free(m);
}

static void test_cleanup(void)
{
	fx_cleanup();
}

/* shoal_gen_run (shoal run's loop) with an MTP drafter: the kept rows'
 * hidden states go into the layer (a prompt longer than a run's rows
 * too), and the ids are those of a run without it, greedy and seeded. */
typedef struct gen_ids {
	uint32_t n;
	int32_t id[32];
} gen_ids;

static int gen_collect(void *ctx, const shoal_gen_token *t)
{
	gen_ids *o = ctx;
	if (o->n < 32)
		o->id[o->n++] = t->id;
	return 0;
}

static void test_gen_mtp(void)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = open_model(fx_path("ds2-mtp", FX_DS2));
	ASSERT_TRUE(m != NULL);
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = ROWS;
	shoal_engine *e = NULL;
	shoal_mtp *t = NULL;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_mtp_new(m, &c, &t, why, sizeof why), SHOAL_OK);
	int32_t prompt[40]; /* 40 > ROWS: the prefill runs in 3 chunks */
	for (uint32_t i = 0; i < 40; i++)
		prompt[i] = PROMPT[i % NP] + (int32_t)(i / NP);
	for (int q = 0; q < 2; q++) {
		shoal_gen_config gc = {.sampler = shoal_sampler_defaults(), .speculate = true};
		gc.sampler.temp = q ? 0.9f : 0.0f;
		gc.sampler.seed = 5;
		gc.sampler.repeat_penalty = q ? 1.1f : 1.0f;
		shoal_gen *g = NULL;
		ASSERT_EQ(shoal_gen_new(e, &gc, &g, why, sizeof why), SHOAL_OK);
		gen_ids plain = {0}, spec = {0};
		shoal_gen_request rq = {.prompt = prompt,
		                        .n_prompt = 40,
		                        .max_tokens = 20,
		                        .on_token = gen_collect,
		                        .ctx = &plain};
		shoal_gen_stats st;
		ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
		rq.ctx = &spec;
		rq.draft_max = 1;
		ASSERT_EQ(shoal_mtp_drafter_new(t, &rq.drafter, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_gen_run(g, &rq, &st, why, sizeof why), SHOAL_OK);
		printf("  shoal_gen_run with MTP (%s): %u drafted, %u kept\n",
		       q ? "seeded" : "greedy", st.drafted, st.accepted);
		ASSERT_EQ(spec.n, 20);
		ASSERT_MEM_EQ(spec.id, plain.id, plain.n * sizeof(int32_t));
		ASSERT_GT(st.drafted, 0);
		shoal_gen_free(g);
	}
	shoal_mtp_free(t);
	shoal_engine_free(e);
	shoal_model_free(m);
}

TEST_MAIN(TEST_CASE(test_mtp_loop), TEST_CASE(test_draft_model_loop), TEST_CASE(test_gen_mtp),
          TEST_CASE(test_cleanup))
