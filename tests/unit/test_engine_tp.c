/*
 * tests/unit/test_engine_tp.c: tensor-parallel members in one process
 * (runtime/engine/engine_tp.c): 2 and 3 members with unequal shares, one
 * thread each, exchanging slices through an in-process all-gather, give
 * logits bitwise equal to the unsplit engine on the trained dense and MoE
 * models and on generated Qwen3, Qwen3-MoE, gpt-oss and glm4moe fixtures, for a prefill
 * batch and greedy decode steps; each member exchanges exactly 4 times per
 * dense layer and 3 times per MoE layer per batch, in the same (layer,
 * round) order. With the head split by vocab rows (split_head, the root
 * first, last or in the middle), the root's logits are bitwise the unsplit
 * ones, and each batch with logits takes one head gather: one message from
 * every other member to the root, n - 1 in all. Bad member configs and a
 * failing exchange or gather are errors.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/engine.h"
#include "tests/unit/test.h"
#include "tests/unit/test_fixture.h"

#define MAXM    3
#define ROWS    16
#define N_PRE   9 /* prefill rows, one batch */
#define N_DEC   4 /* greedy decode steps */
#define MAX_LAY 64

/* ---- fixtures -------------------------------------------------------------- */

/* A trained model: tests/data/models ships the dense one; the MoE one is
 * in the project's shared folder (../shared/models beside the checkout, or
 * $SHOAL_MODELS). NULL when none of them has it. */
static shoal_model *shared_model(const char *file)
{
	char path[3][512];
	const char *src = getenv("SHOAL_SRCDIR"), *mod = getenv("SHOAL_MODELS");
	snprintf(path[0], sizeof path[0], "%s/models/%s", test_data_dir(), file);
	snprintf(path[1], sizeof path[1], "%s/%s", mod ? mod : "/nonexistent", file);
	snprintf(path[2], sizeof path[2], "%s/../shared/models/%s", src ? src : ".", file);
	for (int i = 0; i < 3; i++)
		if (access(path[i], R_OK) == 0)
			return open_model(path[i]);
	return NULL;
}

/* ---- the in-process all-gather ---------------------------------------------- */

typedef struct group group;

typedef struct member {
	group *g;
	uint32_t i;
	shoal_engine *e;
	uint32_t calls;                /* exchanges this batch */
	uint32_t heads;                /* head gathers this batch */
	uint32_t head_sent, head_recv; /* messages of those */
	uint32_t per_layer[MAX_LAY];   /* exchanges per layer this batch */
	shoal_err fail;                /* returned by every exchange when set */
	shoal_err gfail;               /* returned by every head gather when set */
	/* the batch to run and its result */
	const shoal_engine_batch *b;
	float *logits;
	shoal_err err;
	char why[SHOAL_WHY_LEN];
} member;

struct group {
	uint32_t n;
	pthread_barrier_t bar;
	member m[MAXM];
	/* what each member posted for the exchange in progress */
	void *const *bufs[MAXM];
	const size_t *len[MAXM];
	uint32_t layer[MAXM], round[MAXM];
	uint32_t root[MAXM]; /* of the head gather in progress */
	int mismatch;        /* a member saw another (layer, round) or length */
	int broken;          /* this exchange fails on every member */
};

static shoal_err exchange(void *ctx, uint32_t layer, shoal_engine_tp_round round, void *const *bufs,
                          const size_t *len)
{
	member *me = ctx;
	group *g = me->g;
	if (me->fail)
		return me->fail;
	me->calls++;
	if (layer < MAX_LAY)
		me->per_layer[layer]++;
	g->bufs[me->i] = bufs;
	g->len[me->i] = len;
	g->layer[me->i] = layer;
	g->round[me->i] = (uint32_t)round;
	pthread_barrier_wait(&g->bar);
	shoal_err err = SHOAL_OK;
	for (uint32_t j = 0; j < g->n; j++) {
		if (g->layer[j] != layer || g->round[j] != (uint32_t)round) {
			g->mismatch = 1;
			err = SHOAL_ERR_PROTO;
			continue;
		}
		if (j == me->i)
			continue;
		/* member j's own slice, as long as this member expects it */
		if (g->len[j][j] != len[j]) {
			g->mismatch = 1;
			err = SHOAL_ERR_PROTO;
			continue;
		}
		memcpy(bufs[j], g->bufs[j][j], len[j]);
	}
	if (err)
		g->broken = 1;
	/* nobody reuses its buffers before every member has copied; a break
	 * seen by any member fails this exchange on all (no member is left
	 * waiting at the next one) */
	pthread_barrier_wait(&g->bar);
	if (g->broken)
		err = SHOAL_ERR_PROTO;
	return err;
}

/* The head's gather: every member posts its buffers; the root copies each
 * other member's slice, counted as one message sent and one received. */
static shoal_err gather(void *ctx, uint32_t root, void *const *bufs, const size_t *len)
{
	member *me = ctx;
	group *g = me->g;
	if (me->gfail)
		return me->gfail;
	me->heads++;
	g->bufs[me->i] = bufs;
	g->len[me->i] = len;
	g->root[me->i] = root;
	pthread_barrier_wait(&g->bar);
	shoal_err err = SHOAL_OK;
	for (uint32_t j = 0; j < g->n; j++) {
		if (g->root[j] != root) {
			g->mismatch = 1;
			err = SHOAL_ERR_PROTO;
			continue;
		}
		if (j == me->i)
			continue;
		if (j == root) /* the root sends nothing */
			continue;
		if (me->i != root) /* and only the root receives */
			continue;
		if (g->len[j][j] != len[j]) {
			g->mismatch = 1;
			err = SHOAL_ERR_PROTO;
			continue;
		}
		memcpy(bufs[j], g->bufs[j][j], len[j]);
		g->m[j].head_sent++;
		me->head_recv++;
	}
	if (err)
		g->broken = 1;
	pthread_barrier_wait(&g->bar);
	if (g->broken)
		err = SHOAL_ERR_PROTO;
	return err;
}

static void *member_main(void *arg)
{
	member *me = arg;
	me->calls = 0;
	me->heads = me->head_sent = me->head_recv = 0;
	memset(me->per_layer, 0, sizeof me->per_layer);
	shoal_engine_batch b = *me->b;
	b.logits = me->logits; /* NULL on a split head's non-root member */
	me->err = shoal_engine_run(me->e, &b, me->why, sizeof me->why);
	return NULL;
}

static shoal_engine *make(const shoal_model *m, const shoal_engine_tp *tp, char *why,
                          size_t why_len, shoal_err *err)
{
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = ROWS;
	if (tp)
		c.tp = *tp;
	shoal_engine *e = NULL;
	*err = shoal_engine_new(m, &c, &e, why, why_len);
	return e;
}

/* A group of n with weights w; root < n splits the head (the root gets
 * the logits, the others no buffer), UINT32_MAX: every member's head is
 * whole. */
static bool group_init(group *g, const shoal_model *m, uint32_t n, const uint64_t *w, uint32_t root)
{
	memset(g, 0, sizeof *g);
	g->n = n;
	pthread_barrier_init(&g->bar, NULL, n);
	for (uint32_t i = 0; i < n; i++) {
		member *x = &g->m[i];
		x->g = g;
		x->i = i;
		shoal_engine_tp tp = {.n_members = n,
		                      .member = i,
		                      .weights = w,
		                      .split_head = root < n,
		                      .head_root = root < n ? root : 0,
		                      .link = {.ctx = x, .exchange = exchange, .gather = gather}};
		shoal_err err;
		char why[SHOAL_WHY_LEN] = "";
		x->e = make(m, &tp, why, sizeof why, &err);
		if (!x->e) {
			fprintf(stderr, "member %u: %s\n", i, why);
			return false;
		}
		bool out = root >= n || i == root;
		x->logits = out ? malloc((size_t)ROWS * m->hp.n_vocab * sizeof(float)) : NULL;
		uint32_t s;
		if ((out && !x->logits) || shoal_engine_session_open(x->e, &s) || s != 0)
			return false;
	}
	return true;
}

static void group_fini(group *g)
{
	for (uint32_t i = 0; i < g->n; i++) {
		shoal_engine_free(g->m[i].e);
		free(g->m[i].logits);
	}
	pthread_barrier_destroy(&g->bar);
}

/* Run b on every member at once (a thread each). */
static void group_run(group *g, const shoal_engine_batch *b)
{
	pthread_t th[MAXM];
	for (uint32_t i = 0; i < g->n; i++) {
		g->m[i].b = b;
		ASSERT_EQ(pthread_create(&th[i], NULL, member_main, &g->m[i]), 0);
	}
	for (uint32_t i = 0; i < g->n; i++)
		pthread_join(th[i], NULL);
}

/* ---- the comparison ---------------------------------------------------------- */

/* Prefill N_PRE tokens (logits for every row), then N_DEC greedy steps, on
 * the unsplit engine and on a group with weights w (the head split to root
 * < n, or whole on every member); every member's logits (the root's with a
 * split head) equal the unsplit ones bitwise, and its exchanges and head
 * gathers are as designed. */
static void check_group(const shoal_model *m, uint32_t n, const uint64_t *w, uint32_t root)
{
	const shoal_hparams *hp = &m->hp;
	uint32_t V = hp->n_vocab, n_moe = 0;
	for (uint32_t l = 0; l < hp->n_layer; l++)
		n_moe += m->layers[l].ffn_gate_inp != NULL;
	/* exchanges a layer: attention 2 (none with MLA: it runs whole on
	 * every member), a dense FFN 2, an MoE FFN 1 */
	uint32_t att = hp->mla ? 0 : 2,
	         want_calls = (att + 2) * (hp->n_layer - n_moe) + (att + 1) * n_moe;
	ASSERT_LE(hp->n_layer, MAX_LAY);

	shoal_err err;
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine *ref = make(m, NULL, why, sizeof why, &err);
	ASSERT_TRUE(ref != NULL);
	uint32_t slot;
	ASSERT_EQ(shoal_engine_session_open(ref, &slot), SHOAL_OK);
	group *g = calloc(1, sizeof *g);
	ASSERT_TRUE(g != NULL);
	ASSERT_TRUE(group_init(g, m, n, w, root));
	float *lref = malloc((size_t)ROWS * V * sizeof(float));
	ASSERT_TRUE(lref != NULL);

	int32_t tok[ROWS];
	uint32_t pos[ROWS], sess[ROWS] = {0};
	uint8_t want[ROWS];
	for (uint32_t r = 0; r < N_PRE; r++) {
		tok[r] = (int32_t)((r * 7919u + 13u) % V);
		pos[r] = r;
		want[r] = 1;
	}
	uint32_t p = 0, rows = N_PRE;
	for (uint32_t step = 0; step <= N_DEC; step++) {
		shoal_engine_batch b = {.n_rows = rows,
		                        .tokens = tok,
		                        .session = sess,
		                        .pos = pos,
		                        .want_logits = want,
		                        .logits = lref};
		ASSERT_EQ(shoal_engine_run(ref, &b, why, sizeof why), SHOAL_OK);
		group_run(g, &b);
		ASSERT_FALSE(g->mismatch);
		for (uint32_t i = 0; i < n; i++) {
			member *x = &g->m[i];
			if (x->err)
				fprintf(stderr, "member %u: %s\n", i, x->why);
			ASSERT_EQ(x->err, SHOAL_OK);
			if (root >= n || i == root)
				ASSERT_MEM_EQ(x->logits, lref, (size_t)rows * V * sizeof(float));
			ASSERT_EQ(x->calls, want_calls);
			/* the head: one gather a batch, one message from each
			 * non-root member to the root */
			ASSERT_EQ(x->heads, root < n ? 1u : 0u);
			ASSERT_EQ(x->head_sent, root < n && i != root ? 1u : 0u);
			ASSERT_EQ(x->head_recv, root < n && i == root ? n - 1 : 0u);
			for (uint32_t l = 0; l < hp->n_layer; l++)
				ASSERT_EQ(x->per_layer[l],
				          att + (m->layers[l].ffn_gate_inp ? 1u : 2u));
		}
		/* the next token: greedy on the last row */
		int32_t next = argmax(lref + (size_t)(rows - 1) * V, V);
		p += rows;
		rows = 1;
		tok[0] = next;
		pos[0] = p;
	}
	printf("     %u members, weights", n);
	for (uint32_t i = 0; i < n; i++)
		printf(" %llu", (unsigned long long)w[i]);
	printf(": %u prefill rows + %u steps bitwise equal, %u exchanges per member per batch",
	       N_PRE, N_DEC, want_calls);
	if (root < n)
		printf("; head split, root %u: 1 gather, %u messages a batch", root, n - 1);
	printf("\n");
	free(lref);
	group_fini(g);
	free(g);
	shoal_engine_free(ref);
}

static void check_model(shoal_model *m)
{
	static const uint64_t w2[2] = {3, 1}, w3[3] = {5, 2, 3}, w3z[3] = {2, 0, 7};
	ASSERT_TRUE(m != NULL);
	check_group(m, 2, w2, UINT32_MAX);
	check_group(m, 3, w3, UINT32_MAX);
	check_group(m, 3, w3z, UINT32_MAX); /* a member with no share still keeps the state */
	/* the head split by vocab rows, the root first, last, in the middle
	 * and (w3z) beside a member with no rows */
	check_group(m, 2, w2, 0);
	check_group(m, 2, w2, 1);
	check_group(m, 3, w3, 0);
	check_group(m, 3, w3, 1);
	check_group(m, 3, w3z, 2);
	shoal_model_free(m);
}

static void test_dense_q8(void)
{
	check_model(shared_model("austen-dense-q8_0.gguf"));
}

static void test_dense_f16(void)
{
	check_model(shared_model("austen-dense-f16.gguf"));
}

static void test_moe_q8(void)
{
	shoal_model *m = shared_model("austen-moe-q8_0.gguf");
	if (!m)
		TEST_SKIP("austen-moe-q8_0.gguf not in tests/data/models, $SHOAL_MODELS or "
		          "../shared/models");
	check_model(m);
}

static void test_qwen3(void)
{
	/* q/k norms, head dim 64, K-quants, a tied head */
	check_model(open_model(fx_path("qwen3", "--arch qwen3 --type Q6_K --layers 2 --dim 256 "
	                                        "--ff 512 --heads 8 --kv-heads 2 --head-dim 64 "
	                                        "--vocab 300 --ctx 64 --tied --seed 9")));
}

static void test_qwen3moe(void)
{
	check_model(
	    open_model(fx_path("qwen3moe", "--arch qwen3moe --type Q8_0 --layers 3 --dim 128 "
	                                   "--ff 256 --heads 4 --kv-heads 2 --vocab 300 "
	                                   "--experts 8 --experts-used 3 --ff-exp 64 "
	                                   "--ctx 64 --seed 7")));
}

static void test_gptoss(void)
{
	/* attention sinks, a window of 3 on layers 0 and 2, q/k/v/o biases,
	 * router and expert biases, the clamp reached */
	check_model(open_model(fx_path("gptoss",
	                               "--arch gpt-oss --type Q8_0 --layers 3 --dim 128 --heads 4 "
	                               "--kv-heads 2 --head-dim 32 --vocab 300 --experts 8 "
	                               "--experts-used 2 --ff-exp 64 --window 3 --exp-scale 8 "
	                               "--ctx 64 --seed 13")));
}

static void test_glm4moe(void)
{
	/* QKV biases, q/k norms, half of each head rotated, a leading dense
	 * layer, a shared expert, sigmoid routing with groups */
	check_model(open_model(fx_path("glm4moe",
	                               "--arch glm4moe --type Q8_0 --layers 3 --dim 128 --ff 256 "
	                               "--heads 4 --kv-heads 2 --head-dim 32 --vocab 300 "
	                               "--experts 8 --experts-used 2 --ff-exp 64 --dense-lead 1 "
	                               "--shared 1 --groups 2 --groups-used 1 --sigmoid --ctx 64 "
	                               "--seed 17")));
}

static void test_deepseek2(void)
{
	/* MLA (attention whole on every member, its latent cache too), a
	 * leading dense layer split by columns, a shared expert, sigmoid
	 * routing with the selection bias and groups */
	check_model(open_model(fx_path(
	    "deepseek2", "--arch deepseek2 --type Q8_0 --layers 3 --dim 128 --ff 256 --heads 4 "
	                 "--vocab 300 --head-dim 48 --kv-lora 64 --rope-dim 16 --v-head-dim 32 "
	                 "--q-lora 64 --dense-lead 1 --shared 1 --groups 2 --groups-used 1 "
	                 "--sigmoid --experts 8 --experts-used 2 --ff-exp 64 --ctx 64 --seed 19")));
}

static void test_bad_config(void)
{
	shoal_model *m = shared_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	static const uint64_t w[2] = {1, 1}, zero[2] = {0, 0};
	member x = {0};
	shoal_engine_tp bad[6] = {
	    {.n_members = 2, .member = 2, .weights = w, .link = {&x, exchange}},
	    {.n_members = 2, .member = 0, .weights = NULL, .link = {&x, exchange}},
	    {.n_members = 2, .member = 0, .weights = zero, .link = {&x, exchange}},
	    {.n_members = 2, .member = 1, .weights = w, .link = {&x, NULL}},
	    /* a split head: the root out of range; no gather */
	    {.n_members = 2,
	     .member = 0,
	     .weights = w,
	     .split_head = true,
	     .head_root = 2,
	     .link = {&x, exchange, gather}},
	    {.n_members = 2,
	     .member = 0,
	     .weights = w,
	     .split_head = true,
	     .link = {&x, exchange, NULL}},
	};
	for (int i = 0; i < 6; i++) {
		char why[SHOAL_WHY_LEN] = "";
		shoal_err err;
		shoal_engine *e = make(m, &bad[i], why, sizeof why, &err);
		ASSERT_TRUE(e == NULL);
		ASSERT_EQ(err, SHOAL_ERR_INVAL);
		ASSERT_TRUE(why[0] != 0);
	}
	/* a failing exchange fails the run with its error, and the session
	 * keeps no part of the batch */
	group *g = calloc(1, sizeof *g);
	ASSERT_TRUE(g && group_init(g, m, 2, w, UINT32_MAX));
	int32_t tok[2] = {1, 2};
	uint32_t pos[2] = {0, 1}, sess[2] = {0, 0};
	uint8_t want[2] = {0, 1};
	shoal_engine_batch b = {
	    .n_rows = 2, .tokens = tok, .session = sess, .pos = pos, .want_logits = want};
	for (uint32_t i = 0; i < 2; i++)
		g->m[i].fail = SHOAL_ERR_IO;
	group_run(g, &b);
	for (uint32_t i = 0; i < 2; i++) {
		ASSERT_EQ(g->m[i].err, SHOAL_ERR_IO);
		ASSERT_EQ(shoal_engine_session_len(g->m[i].e, 0), 0);
	}
	group_fini(g);
	free(g);
	/* so does a failing head gather, after every layer went through */
	g = calloc(1, sizeof *g);
	ASSERT_TRUE(g && group_init(g, m, 2, w, 1));
	for (uint32_t i = 0; i < 2; i++)
		g->m[i].gfail = SHOAL_ERR_TIMEOUT;
	group_run(g, &b);
	for (uint32_t i = 0; i < 2; i++) {
		ASSERT_EQ(g->m[i].err, SHOAL_ERR_TIMEOUT);
		ASSERT_EQ(g->m[i].calls, 4 * m->hp.n_layer);
		ASSERT_EQ(shoal_engine_session_len(g->m[i].e, 0), 0);
	}
	group_fini(g);
	free(g);
	shoal_model_free(m);
}

static void test_cleanup(void)
{
	fx_cleanup();
}

TEST_MAIN(TEST_CASE(test_dense_q8), TEST_CASE(test_dense_f16), TEST_CASE(test_moe_q8),
          TEST_CASE(test_qwen3), TEST_CASE(test_qwen3moe), TEST_CASE(test_gptoss),
          TEST_CASE(test_glm4moe), TEST_CASE(test_deepseek2), TEST_CASE(test_bad_config),
          TEST_CASE(test_cleanup))
