/*
 * tests/unit/test_engine.c: the engine's invariants (engine.h), on the bundled
 * austen model and on small random fixtures made by tests/helpers/gen_fixture:
 *   (a) layers [0,k) in one engine and [k,L) in another (hidden states
 *       handed over) give bitwise the logits of [0,L) in one;
 *   (b) logits are bitwise independent of the thread count and of how
 *       sessions and prefill chunks are batched;
 *   (c) MoE: contributions computed over a partition of the experts and
 *       combined in expert-id order equal the full MoE output bitwise,
 *       also through the engine's remote-expert hook;
 * and that bad input (tags, tokens, expert ids) is refused, not crashed on.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/model.h"
#include "runtime/engine/engine.h"
#include "runtime/cpu/threadpool.h"
#include "tests/unit/test.h"
#include "tests/unit/test_fixture.h"
#include "runtime/cpu/backend_cpu.h"

/* ---- fixtures -------------------------------------------------------------- */

static shoal_model *austen(const char *type)
{
	char path[512];
	snprintf(path, sizeof path, "%s/models/austen-dense-%s.gguf", test_data_dir(), type);
	return open_model(path);
}

/* random fixtures: small enough to run in milliseconds */
#define FX_QWEN3MOE                                                                                \
	"--arch qwen3moe --type Q8_0 --layers 3 --dim 128 --ff 256 --heads 4 "                     \
	"--kv-heads 2 --vocab 300 --experts 8 --experts-used 3 --ff-exp 64 --ctx 64 --seed 7"
#define FX_MIXTRAL                                                                                 \
	"--arch llama --type F16 --layers 2 --dim 64 --ff 128 --heads 4 "                          \
	"--kv-heads 1 --vocab 300 --experts 4 --experts-used 2 --ff-exp 96 --ctx 64 --seed 3"
#define FX_QWEN2                                                                                   \
	"--arch qwen2 --type Q4_K --layers 3 --dim 256 --ff 512 --heads 4 "                        \
	"--kv-heads 2 --vocab 300 --ctx 64 --seed 5"
#define FX_QWEN3                                                                                   \
	"--arch qwen3 --type Q6_K --layers 2 --dim 256 --ff 512 --heads 8 "                        \
	"--kv-heads 2 --head-dim 64 --vocab 300 --ctx 64 --tied --seed 9"

/* ---- a traced run ------------------------------------------------------------ */

/* How to run the same tokens: threads, where to split the layers (0: one
 * engine), prefill chunk size, experts owned by the first engine (NULL all). */
typedef struct setup {
	uint32_t threads;
	uint32_t split;
	uint32_t chunk;
	const uint8_t *mask; /* (n_expert) owned by the layer owner, per layer */
} setup;

/* The hook of an engine that owns only some experts: remote experts are
 * computed by `peer` (an engine owning them), as a network peer would. */
typedef struct peer_hook {
	shoal_engine *peer;
	int dispatched;
} peer_hook;

static shoal_err hook_dispatch(void *ctx, uint32_t layer, const shoal_moe_rows *rows)
{
	peer_hook *h = ctx;
	(void)layer;
	(void)rows;
	h->dispatched++;
	return SHOAL_OK;
}

static shoal_err hook_collect(void *ctx, uint32_t layer, const shoal_moe_rows *rows, float *contrib)
{
	peer_hook *h = ctx;
	return shoal_engine_moe_partial(h->peer, layer, rows, NULL, contrib, NULL, 0);
}

static shoal_engine *make_engine(const shoal_model *m, uint32_t threads, uint32_t l0, uint32_t l1,
                                 bool embd, bool head, uint32_t max_sessions,
                                 const uint8_t *mask_row, peer_hook *hook)
{
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_threads = threads;
	c.n_ctx = 64;
	c.max_sessions = max_sessions;
	c.max_rows = 32;
	c.layer_begin = l0;
	c.layer_end = l1;
	c.has_embd = embd;
	c.has_head = head;
	uint8_t *mask = NULL;
	if (mask_row && m->hp.n_expert) {
		mask = malloc((size_t)m->hp.n_layer * m->hp.n_expert);
		for (uint32_t l = 0; l < m->hp.n_layer; l++)
			memcpy(mask + (size_t)l * m->hp.n_expert, mask_row, m->hp.n_expert);
		c.expert_mask = mask;
	}
	if (hook) {
		c.moe_hook.ctx = hook;
		c.moe_hook.dispatch = hook_dispatch;
		c.moe_hook.collect = hook_collect;
	}
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_engine_new(m, &c, &e, why, sizeof why))
		fprintf(stderr, "engine: %s\n", why);
	free(mask);
	return e;
}

/* Prefill `prompt` then decode n_dec greedy tokens; logits of the last
 * prompt row and of every decode step into out ((n_dec + 1), n_vocab).
 * Returns 0 on success. */
static int trace(const shoal_model *m, const setup *s, const int32_t *prompt, uint32_t n_prompt,
                 uint32_t n_dec, float *out)
{
	uint32_t L = m->hp.n_layer, V = m->hp.n_vocab, D = m->hp.n_embd;
	uint32_t k = s->split;
	int rc = -1;
	peer_hook hk = {0};
	uint8_t *inv = NULL;
	shoal_engine *a = NULL, *b = NULL;
	if (s->mask) {
		inv = malloc(m->hp.n_expert);
		for (uint32_t x = 0; x < m->hp.n_expert; x++)
			inv[x] = !s->mask[x];
		hk.peer = make_engine(m, s->threads, 0, 0, false, false, 1, inv, NULL);
		if (!hk.peer)
			goto out;
	}
	if (k) {
		a = make_engine(m, s->threads, 0, k, true, false, 1, s->mask, s->mask ? &hk : NULL);
		b = make_engine(m, s->threads, k, L, false, true, 1, s->mask, s->mask ? &hk : NULL);
	} else {
		a = make_engine(m, s->threads, 0, L, true, true, 1, s->mask, s->mask ? &hk : NULL);
	}
	if (!a || (k && !b))
		goto out;
	uint32_t sa, sb = 0, sess[32] = {0}, pos[32];
	uint8_t want[32];
	float *hid = malloc(32 * (size_t)D * sizeof(float));
	shoal_engine_session_open(a, &sa);
	if (b)
		shoal_engine_session_open(b, &sb);
	int32_t tok[32];
	uint32_t p = 0;
	uint32_t chunk = s->chunk ? s->chunk : 32;
	while (p < n_prompt + n_dec) {
		uint32_t n;
		if (p < n_prompt) {
			n = n_prompt - p < chunk ? n_prompt - p : chunk;
			memcpy(tok, prompt + p, n * sizeof *tok);
		} else {
			n = 1;
			tok[0] = argmax(out + (size_t)(p - n_prompt) * V, V);
		}
		for (uint32_t r = 0; r < n; r++) {
			pos[r] = p + r;
			want[r] = p + r >= n_prompt - 1;
			sess[r] = sa;
		}
		float *lg = out + (size_t)(p + n - 1 - (n_prompt - 1)) * V;
		if (p + n - 1 < n_prompt - 1)
			lg = NULL;
		shoal_engine_batch ba = {.n_rows = n,
		                         .tokens = tok,
		                         .session = sess,
		                         .pos = pos,
		                         .want_logits = k ? NULL : want,
		                         .logits = lg,
		                         .hidden_out = k ? hid : NULL};
		char why[SHOAL_WHY_LEN] = "";
		if (shoal_engine_run(a, &ba, why, sizeof why)) {
			fprintf(stderr, "run: %s\n", why);
			free(hid);
			goto out;
		}
		if (k) {
			for (uint32_t r = 0; r < n; r++)
				sess[r] = sb;
			shoal_engine_batch bb = {.n_rows = n,
			                         .hidden_in = hid,
			                         .session = sess,
			                         .pos = pos,
			                         .want_logits = want,
			                         .logits = lg};
			if (shoal_engine_run(b, &bb, why, sizeof why)) {
				fprintf(stderr, "run b: %s\n", why);
				free(hid);
				goto out;
			}
		}
		p += n;
	}
	free(hid);
	rc = (s->mask && hk.dispatched == 0) ? -2 : 0;
out:
	shoal_engine_free(a);
	shoal_engine_free(b);
	shoal_engine_free(hk.peer);
	free(inv);
	return rc;
}

static void prompt_ids(const shoal_model *m, int32_t *ids, uint32_t n)
{
	ids[0] = 1;
	for (uint32_t i = 1; i < n; i++)
		ids[i] = (int32_t)((i * 7919u + 13u) % m->hp.n_vocab);
}

#define N_PROMPT 11
#define N_DEC    6

/* Compare the traces of several setups against the first. */
static int check_setups(const shoal_model *m, const setup *ss, size_t n)
{
	uint32_t V = m->hp.n_vocab;
	size_t sz = (size_t)(N_DEC + 1) * V;
	int32_t ids[N_PROMPT];
	prompt_ids(m, ids, N_PROMPT);
	float *ref = calloc(sz, sizeof(float)), *got = calloc(sz, sizeof(float));
	int bad = trace(m, &ss[0], ids, N_PROMPT, N_DEC, ref);
	if (bad)
		fprintf(stderr, "reference setup failed (%d)\n", bad);
	/* the logits must be finite and not all equal */
	for (size_t i = 0; !bad && i < sz; i++)
		if (!isfinite(ref[i]))
			bad = 1;
	if (!bad && ref[0] == ref[1] && ref[1] == ref[2])
		bad = 1;
	for (size_t i = 1; !bad && i < n; i++) {
		memset(got, 0, sz * sizeof(float));
		int rc = trace(m, &ss[i], ids, N_PROMPT, N_DEC, got);
		if (rc || memcmp(ref, got, sz * sizeof(float))) {
			fprintf(
			    stderr,
			    "setup %zu (threads %u split %u chunk %u mask %s) differs (rc %d)\n", i,
			    ss[i].threads, ss[i].split, ss[i].chunk, ss[i].mask ? "yes" : "no", rc);
			bad = 1;
		}
	}
	free(ref);
	free(got);
	return bad;
}

/* ---- (a) + (b): splits, threads, chunks ------------------------------------------ */

static void check_model_invariants(shoal_model *m)
{
	uint32_t L = m->hp.n_layer;
	setup ss[] = {
	    {.threads = 1},
	    {.threads = 2},
	    {.threads = 3},
	    {.threads = 1, .split = 1},
	    {.threads = 2, .split = L / 2 ? L / 2 : 1},
	    {.threads = 1, .split = L - 1 ? L - 1 : 1},
	    {.threads = 1, .chunk = 1},
	    {.threads = 3, .chunk = 4},
	    {.threads = 2, .chunk = 5, .split = 1},
	};
	int bad = check_setups(m, ss, sizeof ss / sizeof ss[0]);
	shoal_model_free(m);
	ASSERT_EQ(bad, 0);
}

static void test_austen_f32_invariants(void)
{
	shoal_model *m = austen("f32");
	ASSERT_TRUE(m != NULL);
	check_model_invariants(m);
}

static void test_austen_q8_0_invariants(void)
{
	shoal_model *m = austen("q8_0");
	ASSERT_TRUE(m != NULL);
	check_model_invariants(m);
}

static void test_qwen2_q4k_invariants(void)
{
	shoal_model *m = open_model(fx_path("qwen2-q4k", FX_QWEN2));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen2 fixture");
	ASSERT_TRUE(m->layers[0].bq != NULL);
	check_model_invariants(m);
}

static void test_qwen3_q6k_invariants(void)
{
	shoal_model *m = open_model(fx_path("qwen3-q6k", FX_QWEN3));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3 fixture");
	ASSERT_TRUE(m->layers[0].q_norm != NULL);
	check_model_invariants(m);
}

static void test_qwen3moe_invariants(void)
{
	shoal_model *m = open_model(fx_path("qwen3moe-q8", FX_QWEN3MOE));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3moe fixture");
	ASSERT_EQ(m->hp.n_expert, 8);
	check_model_invariants(m);
}

static void test_mixtral_invariants(void)
{
	shoal_model *m = open_model(fx_path("mixtral-f16", FX_MIXTRAL));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a llama MoE fixture");
	ASSERT_EQ(m->hp.n_expert, 4);
	check_model_invariants(m);
}

/* Two sessions decoded separately vs together in one batch, one of them
 * prefilling while the other decodes. */
static void test_sessions_batched(void)
{
	shoal_model *m = austen("q8_0");
	ASSERT_TRUE(m != NULL);
	uint32_t V = m->hp.n_vocab;
	int32_t p1[N_PROMPT], p2[5] = {1, 450, 3381, 338, 263};
	prompt_ids(m, p1, N_PROMPT);
	setup s = {.threads = 2};
	float *r1 = calloc((size_t)(N_DEC + 1) * V, sizeof(float));
	float *r2 = calloc((size_t)(N_DEC + 1) * V, sizeof(float));
	ASSERT_EQ(trace(m, &s, p1, N_PROMPT, N_DEC, r1), 0);
	ASSERT_EQ(trace(m, &s, p2, 5, N_DEC, r2), 0);

	shoal_engine *e = make_engine(m, 2, 0, m->hp.n_layer, true, true, 3, NULL, NULL);
	ASSERT_TRUE(e != NULL);
	uint32_t s0, s1, s2;
	shoal_engine_session_open(e, &s0); /* a slot left unused */
	shoal_engine_session_open(e, &s1);
	shoal_engine_session_open(e, &s2);
	ASSERT_EQ(shoal_engine_session_open(e, &s0), SHOAL_ERR_BUSY);
	/* step 0: session 2's whole prompt plus session 1's first 4 tokens */
	int32_t tok[32];
	uint32_t sess[32], pos[32];
	uint8_t want[32];
	float *lg = malloc(4 * (size_t)V * sizeof(float));
	uint32_t n = 0;
	for (uint32_t i = 0; i < 5; i++, n++) {
		tok[n] = p2[i], sess[n] = s2, pos[n] = i, want[n] = i == 4;
	}
	for (uint32_t i = 0; i < 4; i++, n++) {
		tok[n] = p1[i], sess[n] = s1, pos[n] = i, want[n] = 0;
	}
	shoal_engine_batch b = {.n_rows = n,
	                        .tokens = tok,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = lg};
	ASSERT_EQ(shoal_engine_run(e, &b, NULL, 0), SHOAL_OK);
	ASSERT_MEM_EQ(lg, r2, V * sizeof(float));
	int32_t next2 = argmax(lg, V);
	/* step 1: session 1's rest (interleaved order: its rows first) and
	 * session 2's first decode step */
	n = 0;
	for (uint32_t i = 4; i < N_PROMPT; i++, n++) {
		tok[n] = p1[i], sess[n] = s1, pos[n] = i, want[n] = i == N_PROMPT - 1;
	}
	tok[n] = next2, sess[n] = s2, pos[n] = 5, want[n] = 1, n++;
	b.n_rows = n;
	ASSERT_EQ(shoal_engine_run(e, &b, NULL, 0), SHOAL_OK);
	ASSERT_MEM_EQ(lg, r1, V * sizeof(float));
	ASSERT_MEM_EQ(lg + V, r2 + V, V * sizeof(float));
	/* then both decode together, session 2 first in the batch */
	for (uint32_t t = 1; t < N_DEC; t++) {
		tok[0] = argmax(r2 + (size_t)t * V, V), sess[0] = s2, pos[0] = 5 + t, want[0] = 1;
		tok[1] = argmax(r1 + (size_t)(t - 1) * V, V), sess[1] = s1,
		pos[1] = N_PROMPT + t - 1, want[1] = 1;
		b.n_rows = 2;
		ASSERT_EQ(shoal_engine_run(e, &b, NULL, 0), SHOAL_OK);
		ASSERT_MEM_EQ(lg, r2 + (size_t)(t + 1) * V, V * sizeof(float));
		ASSERT_MEM_EQ(lg + V, r1 + (size_t)t * V, V * sizeof(float));
	}
	ASSERT_EQ(shoal_engine_session_len(e, s1), N_PROMPT + N_DEC - 1);
	free(lg);
	free(r1);
	free(r2);
	shoal_engine_free(e);
	shoal_model_free(m);
}

/* ---- (c) MoE partial sums ------------------------------------------------------------ */

static void check_moe_partition(shoal_model *m)
{
	const shoal_hparams *hp = &m->hp;
	uint32_t D = hp->n_embd, K = hp->n_expert_used, NE = hp->n_expert, n = 9;
	shoal_engine *e = make_engine(m, 2, 0, hp->n_layer, true, true, 1, NULL, NULL);
	ASSERT_TRUE(e != NULL);
	size_t nc = (size_t)n * K * D;
	float *x = malloc((size_t)n * D * sizeof(float));
	int32_t *ids = malloc((size_t)n * K * sizeof(int32_t));
	float *w = malloc((size_t)n * K * sizeof(float));
	float *cf = malloc(nc * sizeof(float)), *cp = malloc(nc * sizeof(float));
	float *of = malloc((size_t)n * D * sizeof(float)),
	      *op = malloc((size_t)n * D * sizeof(float));
	uint64_t st = 12345;
	for (size_t i = 0; i < (size_t)n * D; i++) {
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = (float)((int64_t)(st >> 33) % 2001 - 1000) / 500.0f;
	}
	uint32_t layer = hp->n_layer - 1;
	ASSERT_EQ(shoal_engine_moe_route(e, layer, n, x, ids, w), SHOAL_OK);
	int used[256] = {0};
	for (uint32_t r = 0; r < n; r++) {
		double s = 0;
		for (uint32_t j = 0; j < K; j++) {
			if (j)
				ASSERT_LT(ids[r * K + j - 1], ids[r * K + j]);
			used[ids[r * K + j]] = 1;
			ASSERT_TRUE(w[r * K + j] > 0.0f);
			s += w[r * K + j];
		}
		if (hp->expert_weights_norm)
			ASSERT_NEAR(s, 1.0, 1e-5);
	}
	int n_used = 0;
	for (uint32_t i = 0; i < NE; i++)
		n_used += used[i];
	ASSERT_GT(n_used, 2); /* the partitions below split real work */
	shoal_moe_rows rows = {.n_rows = n, .k = K, .x = x, .ids = ids, .w = w};
	memset(cf, 0xff, nc * sizeof(float)); /* NaN: every slot must be written */
	ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, NULL, cf, NULL, 0), SHOAL_OK);
	for (size_t i = 0; i < nc; i++)
		ASSERT_TRUE(isfinite(cf[i]));
	shoal_engine_moe_combine(n, K, D, cf, of);

	/* partitions: by parity, by halves, one expert at a time in reverse */
	uint8_t mask[256];
	for (int kind = 0; kind < 3; kind++) {
		memset(cp, 0xff, nc * sizeof(float));
		uint32_t n_parts = kind == 2 ? NE : 2;
		for (uint32_t part = 0; part < n_parts; part++) {
			uint32_t pp = kind == 2 ? NE - 1 - part : part;
			for (uint32_t i = 0; i < NE; i++)
				mask[i] = kind == 0   ? (i % 2 == pp)
				          : kind == 1 ? ((i < NE / 2) == !pp)
				                      : i == pp;
			ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, mask, cp, NULL, 0),
			          SHOAL_OK);
		}
		shoal_engine_moe_combine(n, K, D, cp, op);
		ASSERT_MEM_EQ(cf, cp, nc * sizeof(float));
		ASSERT_MEM_EQ(of, op, (size_t)n * D * sizeof(float));
	}
	/* an expert subset leaves the other slots alone */
	memset(cp, 0, nc * sizeof(float));
	for (uint32_t i = 0; i < NE; i++)
		mask[i] = i == (uint32_t)ids[0];
	ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, mask, cp, NULL, 0), SHOAL_OK);
	ASSERT_MEM_EQ(cp, cf, D * sizeof(float));
	for (size_t i = D; i < (size_t)K * D; i++)
		ASSERT_TRUE(cp[i] == 0.0f);
	/* a corrupt (NaN) hidden state routes to valid experts, no crash */
	float *xnan = malloc((size_t)D * sizeof(float));
	int32_t nid[64];
	float nw[64];
	for (uint32_t i = 0; i < D; i++)
		xnan[i] = NAN;
	ASSERT_EQ(shoal_engine_moe_route(e, layer, 1, xnan, nid, nw), SHOAL_OK);
	for (uint32_t j = 0; j < K; j++)
		ASSERT_TRUE(nid[j] >= 0 && (uint32_t)nid[j] < NE &&
		            (j == 0 || nid[j] > nid[j - 1]));
	free(xnan);
	/* bad expert ids from a peer are refused */
	ids[1] = ids[0];
	ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, NULL, cp, NULL, 0), SHOAL_ERR_RANGE);
	ids[1] = (int32_t)NE;
	ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, NULL, cp, NULL, 0), SHOAL_ERR_RANGE);
	rows.k = K + 1;
	ASSERT_EQ(shoal_engine_moe_partial(e, layer, &rows, NULL, cp, NULL, 0), SHOAL_ERR_RANGE);
	free(x);
	free(ids);
	free(w);
	free(cf);
	free(cp);
	free(of);
	free(op);
	shoal_engine_free(e);
}

/* The whole model with the experts split between the layer owner and a
 * peer reached through the hook: bitwise the single-engine logits. */
static void check_moe_hook(shoal_model *m)
{
	uint8_t half[256], odd[256];
	for (uint32_t i = 0; i < m->hp.n_expert; i++) {
		half[i] = i < m->hp.n_expert / 2;
		odd[i] = i % 2;
	}
	setup ss[] = {
	    {.threads = 1},
	    {.threads = 2, .mask = half},
	    {.threads = 1, .mask = odd, .split = 1, .chunk = 3},
	};
	ASSERT_EQ(check_setups(m, ss, 3), 0);
}

static void test_qwen3moe_partial(void)
{
	shoal_model *m = open_model(fx_path("qwen3moe-q8", FX_QWEN3MOE));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3moe fixture");
	check_moe_partition(m);
	check_moe_hook(m);
	shoal_model_free(m);
}

static void test_mixtral_partial(void)
{
	shoal_model *m = open_model(fx_path("mixtral-f16", FX_MIXTRAL));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a llama MoE fixture");
	check_moe_partition(m);
	check_moe_hook(m);
	shoal_model_free(m);
}

/* ---- the thread pool ------------------------------------------------------------------ */

typedef struct pool_job {
	uint32_t hits[8];
	uint32_t nth_seen;
} pool_job;

static void pool_fn(void *ctx, uint32_t ith, uint32_t nth)
{
	pool_job *j = ctx;
	j->hits[ith]++;
	j->nth_seen = nth;
}

/* Every job runs once on every thread and is finished when run returns,
 * also after the workers have gone to sleep. */
static void test_threadpool(void)
{
	for (uint32_t n = 1; n <= 4; n++) {
		shoal_threadpool *p = NULL;
		ASSERT_EQ(shoal_threadpool_new(n, &p), SHOAL_OK);
		ASSERT_EQ(shoal_threadpool_n_threads(p), n);
		pool_job j = {{0}};
		for (int r = 0; r < 2000; r++) {
			shoal_threadpool_run(p, pool_fn, &j);
			if (r == 1000)
				usleep(20000); /* long enough for the workers to sleep */
		}
		for (uint32_t i = 0; i < n; i++)
			ASSERT_EQ(j.hits[i], 2000);
		ASSERT_EQ(j.nth_seen, n);
		shoal_threadpool_free(p);
	}
	shoal_threadpool *p = NULL;
	ASSERT_EQ(shoal_threadpool_new(0, &p), SHOAL_ERR_INVAL);
	shoal_threadpool_free(NULL);
}

/* ---- bad input ------------------------------------------------------------------------ */

static void test_bad_batches(void)
{
	shoal_model *m = austen("q8_0");
	ASSERT_TRUE(m != NULL);
	shoal_engine *e = make_engine(m, 1, 0, m->hp.n_layer, true, true, 2, NULL, NULL);
	ASSERT_TRUE(e != NULL);
	uint32_t s;
	ASSERT_EQ(shoal_engine_session_open(e, &s), SHOAL_OK);
	int32_t tok[3] = {1, 2, 3};
	uint32_t sess[3] = {s, s, s}, pos[3] = {0, 1, 2};
	uint8_t want[3] = {0, 0, 1};
	float *lg = malloc((size_t)m->hp.n_vocab * sizeof(float));
	float hid[256];
	char why[SHOAL_WHY_LEN];
	shoal_engine_batch b = {.n_rows = 3,
	                        .tokens = tok,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = lg};
	tok[1] = (int32_t)m->hp.n_vocab;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	tok[1] = -1;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	tok[1] = 2;
	pos[0] = 1; /* a gap: nothing at 0 */
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	pos[0] = 0, pos[2] = 3; /* not consecutive */
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	pos[2] = 2, sess[1] = 1; /* slot 1 not open */
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_INVAL);
	sess[1] = 99;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_INVAL);
	sess[1] = s;
	b.n_rows = 33;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	b.n_rows = 0;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	b.n_rows = 3;
	b.logits = NULL;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_INVAL);
	b.logits = lg;
	ASSERT_EQ(shoal_engine_session_len(e, s), 0);
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_engine_session_len(e, s), 3);
	pos[0] = 64, b.n_rows = 1; /* beyond the context */
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_RANGE);
	/* rewind: positions 1.. again */
	pos[0] = 1;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_engine_session_len(e, s), 2);
	shoal_engine_free(e);

	/* a stage without embedding wants hidden states; one without a head
	 * refuses logits */
	e = make_engine(m, 1, 2, 4, false, false, 1, NULL, NULL);
	ASSERT_TRUE(e != NULL);
	ASSERT_EQ(shoal_engine_session_open(e, &s), SHOAL_OK);
	b.n_rows = 1, sess[0] = s, pos[0] = 0, want[0] = 1;
	b.logits = lg;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_INVAL);
	memset(hid, 0, sizeof hid);
	b.hidden_in = hid;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_ERR_INVAL);
	want[0] = 0;
	ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_OK);
	shoal_engine_free(e);

	shoal_engine_config c = shoal_engine_config_default(m);

	c.backend = shoal_backend_cpu();
	c.layer_begin = 3, c.layer_end = 99;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_INVAL);
	c.layer_end = 2;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_INVAL);
	free(lg);
	shoal_model_free(m);
}

/* Llama 3.1's rope_freqs divide each rotated pair's angle: factors of 2
 * everywhere must give exactly the logits of a linear rope scale of 1/2
 * (theta / 2 == 0.5 * theta in float), and differ from no scaling. */
#define FX_LLAMA_DENSE                                                                             \
	"--arch llama --type F32 --layers 2 --dim 64 --ff 128 --heads 4 "                          \
	"--kv-heads 2 --vocab 300 --ctx 64 --seed 11"
static void test_rope_freqs(void)
{
	shoal_model *m = open_model(fx_path("llama_dense", FX_LLAMA_DENSE));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a llama fixture");
	uint32_t V = m->hp.n_vocab, half = m->hp.n_rot / 2;
	int32_t prompt[8];
	prompt_ids(m, prompt, 8);
	setup s = {.threads = 1};
	float *plain = calloc(V, sizeof(float)), *freqs = calloc(V, sizeof(float)),
	      *scaled = calloc(V, sizeof(float)), *ff = malloc(half * sizeof(float));
	for (uint32_t i = 0; i < half; i++)
		ff[i] = 2.0f;
	ASSERT_EQ(trace(m, &s, prompt, 8, 0, plain), 0);
	shoal_gguf_tensor t = {.name = "rope_freqs.weight",
	                       .n_dims = 1,
	                       .ne = {half, 1, 1, 1},
	                       .type = SHOAL_DTYPE_F32,
	                       .data = ff,
	                       .nbytes = (uint64_t)half * sizeof(float)};
	m->rope_freqs = &t;
	ASSERT_EQ(trace(m, &s, prompt, 8, 0, freqs), 0);
	m->rope_freqs = NULL;
	m->hp.rope_freq_scale = 0.5f;
	ASSERT_EQ(trace(m, &s, prompt, 8, 0, scaled), 0);
	ASSERT_MEM_EQ(freqs, scaled, V * sizeof(float));
	ASSERT_TRUE(memcmp(freqs, plain, V * sizeof(float)) != 0);
	/* A factor that is not a positive number is bad input, not a NaN. */
	ff[1] = 0.0f;
	m->rope_freqs = &t;
	m->hp.rope_freq_scale = 1.0f;
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(e == NULL);
	m->rope_freqs = NULL;
	free(plain);
	free(freqs);
	free(scaled);
	free(ff);
	shoal_model_free(m);
}

/* A file may say general.alignment 1 or 2; a weight off its type's natural
 * alignment is refused (the kernels read floats and fp16 fields through
 * typed pointers), never computed with. */
static void test_misaligned_weights(void)
{
	shoal_model *m = open_model(fx_path("llama_dense", FX_LLAMA_DENSE));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a llama fixture");
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 16;
	const shoal_gguf_tensor *wq = m->layers[0].wq, *norm = m->layers[0].attn_norm,
	                        *embd = m->tok_embd;
	shoal_gguf_tensor *fake = malloc(3 * sizeof *fake);
	uint8_t *buf[3];
	const shoal_gguf_tensor *orig[3] = {wq, norm, embd};
	for (int i = 0; i < 3; i++) {
		fake[i] = *orig[i];
		buf[i] = malloc(orig[i]->nbytes + 8);
		memcpy(buf[i] + 2, orig[i]->data, orig[i]->nbytes);
		fake[i].data = buf[i] + 2; /* F32 at 2 mod 4 */
	}
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	shoal_engine_free(e);
	for (int i = 0; i < 3; i++) {
		e = NULL;
		why[0] = 0;
		if (i == 0)
			m->layers[0].wq = &fake[0];
		else if (i == 1)
			m->layers[0].attn_norm = &fake[1];
		else
			m->tok_embd = &fake[2];
		ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_FORMAT);
		ASSERT_TRUE(e == NULL && strstr(why, "not aligned") != NULL);
		m->layers[0].wq = wq;
		m->layers[0].attn_norm = norm;
		m->tok_embd = embd;
	}
	for (int i = 0; i < 3; i++)
		free(buf[i]);
	free(fake);
	shoal_model_free(m);
}

/* A weights cache holds only what was fetched: cfg.tensor_held names the
 * held tensors, and an engine whose part binds one that is not held fails
 * naming it (never reads the hole as zeros); tensors outside its part do
 * not matter. */
static const shoal_gguf_tensor *held_refuse;
static unsigned held_calls;
static bool held_but_one(void *ctx, const shoal_gguf_tensor *t)
{
	(void)ctx;
	held_calls++;
	return t != held_refuse;
}

static void test_tensor_held(void)
{
	shoal_model *m = open_model(fx_path("llama_dense", FX_LLAMA_DENSE));
	if (!m)
		TEST_SKIP("tests/helpers/gen_fixture could not make a llama fixture");
	ASSERT_TRUE(m->hp.n_layer >= 2);
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 16;
	c.tensor_held = held_but_one;
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	held_refuse = NULL;
	held_calls = 0;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(held_calls > 0);
	shoal_engine_free(e);
	const shoal_gguf_tensor *refuse[] = {m->layers[0].wq, m->layers[1].ffn_down,
	                                     m->layers[0].attn_norm, m->tok_embd, m->output_norm};
	for (size_t i = 0; i < sizeof refuse / sizeof *refuse; i++) {
		ASSERT_TRUE(refuse[i] != NULL);
		held_refuse = refuse[i];
		e = NULL;
		why[0] = 0;
		ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_NOTFOUND);
		ASSERT_TRUE(e == NULL && strstr(why, "not held") && strstr(why, refuse[i]->name));
	}
	/* layer 1 only, no embedding: layer 0's wq and the embedding are not
	 * its part, layer 1's down projection is */
	c.layer_begin = 1;
	c.layer_end = 2;
	c.has_embd = false;
	c.has_head = false;
	held_refuse = m->layers[0].wq;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	shoal_engine_free(e);
	held_refuse = m->tok_embd;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
	shoal_engine_free(e);
	e = NULL;
	held_refuse = m->layers[1].ffn_down;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(e == NULL);
	shoal_model_free(m);
}

static void cleanup(void)
{
	fx_cleanup();
}

/* The KV cache's element type: F16 (the default) keeps half the bytes of
 * F32 and gives the austen model's logits close to F32's (not
 * the same bits: the cache is rounded); a type the backend cannot keep is
 * refused by name. */
static void test_kv_types(void)
{
	shoal_model *m = austen("q8_0");
	ASSERT_TRUE(m != NULL);
	enum { N = 40 };
	uint32_t V = m->hp.n_vocab, sess[N], pos[N];
	int32_t prompt[N];
	uint8_t want[N] = {0};
	prompt_ids(m, prompt, N);
	want[N - 1] = 1;
	const shoal_dtype types[2] = {SHOAL_DTYPE_F32, SHOAL_DTYPE_F16};
	float *lg[2] = {malloc(V * sizeof(float)), malloc(V * sizeof(float))};
	uint64_t bytes[2];
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = shoal_engine_config_default(m);
	ASSERT_EQ(c.kv_type, SHOAL_DTYPE_F16);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = N;
	for (int i = 0; i < 2; i++) {
		c.kv_type = types[i];
		shoal_engine *e = NULL;
		ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
		bytes[i] = shoal_engine_kv_bytes_per_token(e);
		uint32_t slot;
		ASSERT_EQ(shoal_engine_session_open(e, &slot), SHOAL_OK);
		for (uint32_t r = 0; r < N; r++)
			sess[r] = slot, pos[r] = r;
		shoal_engine_batch b = {.n_rows = N,
		                        .tokens = prompt,
		                        .session = sess,
		                        .pos = pos,
		                        .want_logits = want,
		                        .logits = lg[i]};
		ASSERT_EQ(shoal_engine_run(e, &b, why, sizeof why), SHOAL_OK);
		shoal_engine_free(e);
	}
	/* 6 layers x K and V x 4 heads x 32 */
	ASSERT_U64_EQ(bytes[0], 6 * 2 * 4 * 32 * 4);
	ASSERT_U64_EQ(bytes[1], 6 * 2 * 4 * 32 * 2);
	double dmax = 0, amax = 0;
	for (uint32_t v = 0; v < V; v++) {
		double d = fabs((double)lg[0][v] - lg[1][v]);
		dmax = d > dmax ? d : dmax;
		amax = fabs(lg[0][v]) > amax ? fabs(lg[0][v]) : amax;
	}
	printf("  F16 against F32 cache: logits within %.2e (largest %.1f)\n", dmax, amax);
	ASSERT_TRUE(dmax > 0.0);
	ASSERT_TRUE(dmax < 0.05 * amax); /* a wrong F16 path gives logits apart by ~amax */
	c.kv_type = SHOAL_DTYPE_Q8_0;
	shoal_engine *e = NULL;
	ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(e == NULL && strstr(why, "KV cache of Q8_0") != NULL);
	free(lg[0]);
	free(lg[1]);
	shoal_model_free(m);
}

/* The prefix cache's premise (runtime/dist/dist.h "The prefix cache"): KV
 * written by one session -- a prefill in chunks, then decode steps one row
 * at a time, as a conversation's turn -- and reused by the next after a
 * rewind gives bitwise the logits a fresh session computes from scratch
 * in one batch, for the F16 and the F32 cache. */
static void test_prefix_reuse(void)
{
	shoal_model *m = austen("q8_0");
	ASSERT_TRUE(m != NULL);
	enum { P = 40, D = 10, K = 32, N2 = 46 };
	uint32_t V = m->hp.n_vocab, sess[N2], pos[N2];
	int32_t a[P + D], b[N2];
	uint8_t want[N2] = {0};
	prompt_ids(m, a, P + D);
	memcpy(b, a, K * sizeof *b); /* b shares a's first K = 2 blocks, then differs */
	for (uint32_t i = K; i < N2; i++)
		b[i] = a[(i * 5u) % (P + D)];
	float *lg[2] = {malloc(V * sizeof(float)), malloc(V * sizeof(float))};
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = N2;
	c.max_sessions = 2;
	const shoal_dtype types[2] = {SHOAL_DTYPE_F16, SHOAL_DTYPE_F32};
	for (int t = 0; t < 2; t++) {
		c.kv_type = types[t];
		shoal_engine *e = NULL;
		ASSERT_EQ(shoal_engine_new(m, &c, &e, why, sizeof why), SHOAL_OK);
		uint32_t s0, s1;
		ASSERT_EQ(shoal_engine_session_open(e, &s0), SHOAL_OK);
		ASSERT_EQ(shoal_engine_session_open(e, &s1), SHOAL_OK);
		/* turn 1 on s0: a prefill of P rows in chunks of 16, then D steps */
		for (uint32_t p = 0; p < P + D;) {
			uint32_t n = p < P ? (P - p < 16 ? P - p : 16) : 1;
			for (uint32_t r = 0; r < n; r++)
				sess[r] = s0, pos[r] = p + r;
			shoal_engine_batch bt = {
			    .n_rows = n, .tokens = a + p, .session = sess, .pos = pos};
			ASSERT_EQ(shoal_engine_run(e, &bt, why, sizeof why), SHOAL_OK);
			p += n;
		}
		ASSERT_EQ(shoal_engine_session_len(e, s0), P + D);
		/* turn 2 on s0 from position K (the rest rewound) */
		memset(want, 0, sizeof want);
		want[N2 - K - 1] = 1;
		for (uint32_t r = 0; r < N2 - K; r++)
			sess[r] = s0, pos[r] = K + r;
		shoal_engine_batch b2 = {.n_rows = N2 - K,
		                         .tokens = b + K,
		                         .session = sess,
		                         .pos = pos,
		                         .want_logits = want,
		                         .logits = lg[0]};
		ASSERT_EQ(shoal_engine_run(e, &b2, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_engine_session_len(e, s0), N2);
		/* the same prompt from scratch on s1, one batch */
		memset(want, 0, sizeof want);
		want[N2 - 1] = 1;
		for (uint32_t r = 0; r < N2; r++)
			sess[r] = s1, pos[r] = r;
		shoal_engine_batch b3 = {.n_rows = N2,
		                         .tokens = b,
		                         .session = sess,
		                         .pos = pos,
		                         .want_logits = want,
		                         .logits = lg[1]};
		ASSERT_EQ(shoal_engine_run(e, &b3, why, sizeof why), SHOAL_OK);
		ASSERT_MEM_EQ(lg[0], lg[1], V * sizeof(float));
		shoal_engine_free(e);
	}
	free(lg[0]);
	free(lg[1]);
	shoal_model_free(m);
}

static void test_cleanup(void)
{
	cleanup();
	ASSERT_TRUE(1);
}

TEST_MAIN(TEST_CASE(test_threadpool), TEST_CASE(test_austen_f32_invariants),
          TEST_CASE(test_austen_q8_0_invariants), TEST_CASE(test_sessions_batched),
          TEST_CASE(test_qwen2_q4k_invariants), TEST_CASE(test_qwen3_q6k_invariants),
          TEST_CASE(test_qwen3moe_invariants), TEST_CASE(test_mixtral_invariants),
          TEST_CASE(test_qwen3moe_partial), TEST_CASE(test_mixtral_partial),
          TEST_CASE(test_bad_batches), TEST_CASE(test_rope_freqs),
          TEST_CASE(test_misaligned_weights), TEST_CASE(test_tensor_held), TEST_CASE(test_kv_types),
          TEST_CASE(test_prefix_reuse), TEST_CASE(test_cleanup))
