/*
 * tests/test_dist.c: distributed inference in one process: stages, expert
 * servers and the owner each on a thread, over real loopback TCP xfer
 * links. Tokens and top-K logprobs must equal one whole-model engine's
 * bitwise (dense 3-stage split, MoE with experts on 3 peers); the link
 * counters must show one HIDDEN frame per hop per step and at most one
 * expert request per remote peer per MoE layer per run; malformed and
 * wrong-digest frames are dropped and fail the session cleanly.
 *
 * Divisions: links and peers, the reference, the cluster, tests.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "models/model.h"
#include "runtime/dist.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "tests/test.h"

static const uint8_t DIGEST[32] = {0xd1, 0x57, 3, 4};
static const uint8_t OTHER[32] = {0xee, 0xee};
#define EPOCH     7
#define K_TOP     5
#define MAX_PEERS 8
#define MAX_TOK   64

/* ---- links and peers ------------------------------------------------------- */

static int admit_all(void *ctx, const uint8_t peer[16], const char *addr, const uint8_t *tok,
                     size_t n)
{
	(void)ctx, (void)peer, (void)addr, (void)tok, (void)n;
	return 1;
}

static shoal_xfer_listener *g_lis;

typedef struct conn_job {
	shoal_xfer_config cfg;
	shoal_xfer_link *link;
	shoal_err e;
	char why[256];
} conn_job;

static void *conn_main(void *p)
{
	conn_job *j = p;
	j->e = shoal_xfer_link_connect(&j->cfg, "127.0.0.1", shoal_xfer_listener_port(g_lis),
	                               (const uint8_t *)"t", 1, &j->link, j->why, sizeof j->why);
	return NULL;
}

typedef struct peer {
	uint8_t id[16];
	uint8_t tab_id[MAX_PEERS][16];
	shoal_xfer_link *links[MAX_PEERS];
	uint32_t n;
	shoal_dist_stage *st;
	pthread_t th;
	atomic_int stop;
	bool running;
} peer;

static shoal_xfer_link *lookup(void *ctx, const uint8_t id[16])
{
	peer *p = ctx;
	for (uint32_t i = 0; i < p->n; i++)
		if (!memcmp(p->tab_id[i], id, 16))
			return p->links[i];
	return NULL;
}

/* Connect a to b (a connects, b accepts); each side files its end. */
static int connect_pair(peer *a, peer *b, uint32_t max_frame)
{
	conn_job j = {0};
	shoal_xfer_config_default(&j.cfg);
	j.cfg.verbs = NULL;
	j.cfg.max_frame = max_frame;
	memcpy(j.cfg.self_id, a->id, 16);
	pthread_t th;
	pthread_create(&th, NULL, conn_main, &j);
	shoal_xfer_link *acc = NULL;
	char why[256];
	shoal_err e = shoal_xfer_listener_accept(g_lis, 5000, &acc, why, sizeof why);
	pthread_join(th, NULL);
	if (e || j.e) {
		fprintf(stderr, "link: %s / %s\n", e ? why : "", j.why);
		shoal_xfer_link_free(acc);
		shoal_xfer_link_free(j.link);
		return -1;
	}
	shoal_xfer_link_set_plan(j.link, DIGEST, EPOCH);
	shoal_xfer_link_set_plan(acc, DIGEST, EPOCH);
	memcpy(a->tab_id[a->n], b->id, 16);
	a->links[a->n++] = j.link;
	memcpy(b->tab_id[b->n], a->id, 16);
	b->links[b->n++] = acc;
	return 0;
}

static void *peer_main(void *arg)
{
	peer *p = arg;
	char why[256];
	while (!atomic_load(&p->stop)) {
		shoal_err e = shoal_dist_stage_poll(p->st, p->links, p->n, 20, why, sizeof why);
		if (e) {
			fprintf(stderr, "stage thread: %s\n", why);
			break;
		}
	}
	return NULL;
}

/* ---- the reference: one engine, the loop of `shoal run` ------------------------ */

typedef struct run_out {
	uint32_t n;
	int32_t id[MAX_TOK];
	float lp[MAX_TOK];
	int32_t top_id[MAX_TOK][K_TOP];
	float top_lp[MAX_TOK][K_TOP];
} run_out;

static int reference(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                     const shoal_sampler_params *sp, run_out *out)
{
	shoal_engine_config c = shoal_engine_config_default(m);
	c.n_ctx = 128;
	c.max_rows = 64;
	shoal_engine *e = NULL;
	shoal_sampler *smp = NULL;
	char why[256];
	uint32_t V = m->hp.n_vocab;
	float *logits = malloc((size_t)V * sizeof *logits);
	int32_t hist[256];
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_sampler_new(sp, V, &smp)) {
		fprintf(stderr, "reference: %s\n", why);
		return -1;
	}
	uint32_t slot, pos[64], sess[64] = {0};
	uint8_t want[64];
	shoal_engine_session_open(e, &slot);
	for (uint32_t r = 0; r < np; r++) {
		pos[r] = r;
		sess[r] = slot;
		want[r] = r == np - 1;
		hist[r] = prompt[r];
	}
	shoal_engine_batch b = {.n_rows = np,
	                        .tokens = prompt,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = logits};
	int rc = shoal_engine_run(e, &b, why, sizeof why) ? -1 : 0;
	uint32_t nh = np;
	out->n = 0;
	for (uint32_t t = 0; !rc && t < n_gen; t++) {
		int32_t id = shoal_sampler_sample(smp, logits, hist, nh, t);
		hist[nh++] = id;
		out->id[t] = id;
		shoal_logprobs_top(logits, V, id, &out->lp[t], K_TOP, out->top_id[t],
		                   out->top_lp[t]);
		out->n++;
		uint32_t p1 = nh - 1;
		uint8_t w1 = 1;
		shoal_engine_batch b1 = {.n_rows = 1,
		                         .tokens = &id,
		                         .session = sess,
		                         .pos = &p1,
		                         .want_logits = &w1,
		                         .logits = logits};
		if (t + 1 < n_gen && shoal_engine_run(e, &b1, why, sizeof why))
			rc = -1;
	}
	shoal_sampler_free(smp);
	shoal_engine_free(e);
	free(logits);
	return rc;
}

static int collect_token(void *ctx, const shoal_dist_token *t)
{
	run_out *o = ctx;
	if (o->n >= MAX_TOK)
		return 1;
	o->id[o->n] = t->id;
	o->lp[o->n] = t->logprob;
	for (uint32_t j = 0; j < K_TOP && j < t->n_top; j++) {
		o->top_id[o->n][j] = t->top_ids[j];
		o->top_lp[o->n][j] = t->top_lps[j];
	}
	o->n++;
	return 0;
}

/* ---- the cluster ------------------------------------------------------------------ */

typedef struct cluster {
	const shoal_model *m;
	peer owner;
	peer st[4];
	peer ex[3];
	peer intruder;
	uint32_t n_st, n_ex;
	shoal_dist_owner *own;
	uint8_t *mask_st, *mask_ex[3], *xpeer;
} cluster;

static void id_of(uint8_t id[16], uint8_t v)
{
	memset(id, v, 16);
}

/* Stages split the layers at cuts[] (n_st stages); with n_ex > 0 the
 * experts are split: the stages hold x % (n_ex + 1) == 0, server s the
 * experts with x % (n_ex + 1) == s + 1. */
static int cluster_up(cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
                      uint32_t n_ex, uint32_t max_frame, uint32_t owner_rows, bool intruder)
{
	memset(c, 0, sizeof *c);
	c->m = m;
	c->n_st = n_st;
	c->n_ex = n_ex;
	char why[256];
	shoal_xfer_config lc;
	shoal_xfer_config_default(&lc);
	lc.verbs = NULL;
	lc.max_frame = max_frame;
	id_of(lc.self_id, 0x99);
	if (shoal_xfer_listener_new(&lc, "127.0.0.1", 0, admit_all, NULL, &g_lis, why, sizeof why))
		return -1;
	id_of(c->owner.id, 0x10);
	id_of(c->intruder.id, 0x40);
	for (uint32_t i = 0; i < n_st; i++)
		id_of(c->st[i].id, (uint8_t)(0x20 + i));
	for (uint32_t i = 0; i < n_ex; i++)
		id_of(c->ex[i].id, (uint8_t)(0x30 + i));
	int rc = connect_pair(&c->owner, &c->st[0], max_frame);
	for (uint32_t i = 0; !rc && i + 1 < n_st; i++)
		rc = connect_pair(&c->st[i], &c->st[i + 1], max_frame);
	if (!rc && n_st > 1)
		rc = connect_pair(&c->st[n_st - 1], &c->owner, max_frame);
	for (uint32_t i = 0; !rc && i < n_st; i++)
		for (uint32_t s = 0; !rc && s < n_ex; s++)
			rc = connect_pair(&c->st[i], &c->ex[s], max_frame);
	if (!rc && intruder)
		rc = connect_pair(&c->intruder, &c->st[n_st > 1 ? 1 : 0], max_frame);
	if (rc)
		return -1;
	uint32_t L = m->hp.n_layer, E = m->hp.n_expert;
	if (n_ex) {
		c->mask_st = calloc((size_t)L * E, 1);
		c->xpeer = calloc((size_t)L * E, 16);
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t x = 0; x < E; x++) {
				uint32_t who = x % (n_ex + 1);
				c->mask_st[l * E + x] = who == 0;
				if (who)
					id_of(c->xpeer + ((size_t)l * E + x) * 16,
					      (uint8_t)(0x30 + who - 1));
			}
		for (uint32_t s = 0; s < n_ex; s++) {
			c->mask_ex[s] = calloc((size_t)L * E, 1);
			for (uint32_t l = 0; l < L; l++)
				for (uint32_t x = 0; x < E; x++)
					c->mask_ex[s][l * E + x] = x % (n_ex + 1) == s + 1;
		}
	}
	for (uint32_t i = 0; i < n_st + n_ex; i++) {
		peer *p = i < n_st ? &c->st[i] : &c->ex[i - n_st];
		shoal_dist_stage_config sc = {.n_threads = 1,
		                              .n_ctx = 128,
		                              .max_sessions = 2,
		                              .max_rows = 64,
		                              .link = lookup,
		                              .link_ctx = p,
		                              .timeout_ms = 5000,
		                              .epoch = EPOCH};
		memcpy(sc.digest, DIGEST, 32);
		memcpy(sc.self, p->id, 16);
		if (i < n_st) {
			sc.layer_begin = i ? cuts[i - 1] : 0;
			sc.layer_end = i + 1 < n_st ? cuts[i] : L;
			sc.has_embd = i == 0;
			sc.has_head = i + 1 == n_st;
			if (i + 1 < n_st)
				memcpy(sc.next, c->st[i + 1].id, 16);
			sc.expert_mask = c->mask_st;
			sc.expert_peer = c->xpeer;
		} else {
			sc.expert_mask = c->mask_ex[i - n_st];
		}
		if (shoal_dist_stage_new(m, &sc, &p->st, why, sizeof why)) {
			fprintf(stderr, "stage %u: %s\n", i, why);
			return -1;
		}
		pthread_create(&p->th, NULL, peer_main, p);
		p->running = true;
	}
	shoal_dist_owner_config oc = {.max_sessions = 2,
	                              .max_rows = owner_rows,
	                              .link = lookup,
	                              .link_ctx = &c->owner,
	                              .timeout_ms = 5000,
	                              .epoch = EPOCH};
	memcpy(oc.digest, DIGEST, 32);
	memcpy(oc.self, c->owner.id, 16);
	memcpy(oc.first, c->st[0].id, 16);
	return shoal_dist_owner_new(&oc, &c->own, why, sizeof why) ? -1 : 0;
}

static void cluster_stop(cluster *c)
{
	for (uint32_t i = 0; i < c->n_st + c->n_ex; i++) {
		peer *p = i < c->n_st ? &c->st[i] : &c->ex[i - c->n_st];
		atomic_store(&p->stop, 1);
		if (p->running)
			pthread_join(p->th, NULL);
		p->running = false;
	}
}

static void peer_free(peer *p)
{
	shoal_dist_stage_free(p->st);
	for (uint32_t i = 0; i < p->n; i++)
		shoal_xfer_link_free(p->links[i]);
}

static void cluster_down(cluster *c)
{
	cluster_stop(c);
	for (uint32_t i = 0; i < c->n_st; i++)
		peer_free(&c->st[i]);
	for (uint32_t i = 0; i < c->n_ex; i++)
		peer_free(&c->ex[i]);
	peer_free(&c->owner);
	peer_free(&c->intruder);
	shoal_dist_owner_free(c->own);
	shoal_xfer_listener_free(g_lis);
	g_lis = NULL;
	free(c->mask_st);
	free(c->xpeer);
	for (uint32_t s = 0; s < 3; s++)
		free(c->mask_ex[s]);
}

static uint64_t link_count(peer *p, const uint8_t *to, int sent, unsigned kind)
{
	shoal_xfer_link *l = lookup(p, to);
	shoal_xfer_metrics mt;
	if (!l)
		return ~0ull;
	shoal_xfer_link_metrics(l, &mt);
	return sent ? mt.frames_sent[kind] : mt.frames_recv[kind];
}

static int same_run(const run_out *a, const run_out *b)
{
	if (a->n != b->n)
		return 0;
	for (uint32_t t = 0; t < a->n; t++)
		if (a->id[t] != b->id[t] || memcmp(&a->lp[t], &b->lp[t], 4) ||
		    memcmp(a->top_id[t], b->top_id[t], sizeof a->top_id[t]) ||
		    memcmp(a->top_lp[t], b->top_lp[t], sizeof a->top_lp[t])) {
			fprintf(stderr, "step %u: id %d vs %d, lp %.9g vs %.9g\n", t, a->id[t],
			        b->id[t], a->lp[t], b->lp[t]);
			return 0;
		}
	return 1;
}

static shoal_model *open_model(const char *name)
{
	char path[1024];
	const char *dir = getenv("SHOAL_DATA");
	snprintf(path, sizeof path, "%s/models/%s", dir ? dir : "tests/data", name);
	shoal_model *m = NULL;
	char why[256];
	if (shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", path, why);
		return NULL;
	}
	return m;
}

static const int32_t PROMPT[] = {1,   450,  338,  263, 8760, 29871, 6967,  9904,  29892, 393,
                                 263, 6114, 4223, 310, 263,  1781,  19717, 29892, 1818,  367};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* Run one request through the cluster and the reference; compare. */
static int check_run(cluster *c, const shoal_sampler_params *sp, uint32_t n_gen,
                     const int32_t *prompt, uint32_t np, run_out *got)
{
	run_out want;
	if (reference(c->m, prompt, np, n_gen, sp, &want))
		return 0;
	memset(got, 0, sizeof *got);
	shoal_dist_request rq = {.prompt = prompt,
	                         .n_prompt = np,
	                         .max_tokens = n_gen,
	                         .logprobs = K_TOP,
	                         .sampler = *sp,
	                         .on_token = collect_token,
	                         .ctx = got};
	char why[256] = "";
	shoal_err e = shoal_dist_owner_generate(c->own, &rq, c->owner.links, c->owner.n, 10000, why,
	                                        sizeof why);
	if (e) {
		fprintf(stderr, "generate: %s: %s\n", shoal_strerror(e), why);
		return 0;
	}
	return same_run(&want, got);
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_dense_three_stages(void)
{
	shoal_model *m = open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, PROMPT, NP, &got);
	/* temperature, top-k/p, min-p and a repetition penalty, seeded */
	sp = shoal_sampler_defaults();
	sp.seed = 1234;
	sp.temp = 1.1f;
	sp.repeat_penalty = 1.1f;
	int ok2 = ok && check_run(&c, &sp, T, PROMPT, NP, &got);
	cluster_stop(&c);
	/* per hop: 2 prefill frames (one per request) + (T - 1) decode steps each */
	uint64_t hops = 2 * (1 + (T - 1));
	uint64_t h01 = link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	uint64_t h12 = link_count(&c.st[1], c.st[2].id, 1, SHOAL_XFER_KIND_HIDDEN);
	uint64_t h12r = link_count(&c.st[2], c.st[1].id, 0, SHOAL_XFER_KIND_HIDDEN);
	/* owner -> stage 0: open + prefill + (T - 1) ids + close, per request */
	uint64_t t0 = link_count(&c.owner, c.st[0].id, 1, SHOAL_XFER_KIND_TOKEN);
	/* last -> owner: exactly one result frame per generated token */
	uint64_t t2 = link_count(&c.st[2], c.owner.id, 1, SHOAL_XFER_KIND_TOKEN);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	printf("dense 3 stages: stage 1 ran %llu steps, last %.1f us, mean %.1f us\n",
	       (unsigned long long)sm.runs, sm.last_run_ns / 1e3,
	       sm.runs ? sm.run_ns / 1e3 / (double)sm.runs : 0.0);
	cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_TRUE(ok2);
	ASSERT_U64_EQ(h01, hops);
	ASSERT_U64_EQ(h12, hops);
	ASSERT_U64_EQ(h12r, hops);
	ASSERT_U64_EQ(t0, 2 * (1 + 1 + (T - 1) + 1));
	ASSERT_U64_EQ(t2, 2 * T);
}

/* F32 weights; prompt in frames of 8 rows, links of 4 KiB: each prefill
 * frame's hidden states (8 x 1040 bytes) go as 3 + 3 + 2 rows. */
static void test_dense_split_frames(void)
{
	shoal_model *m = open_model("austen-dense-f32.gguf");
	ASSERT_TRUE(m != NULL);
	cluster c;
	const uint32_t cuts[] = {3};
	ASSERT_EQ(cluster_up(&c, m, cuts, 2, 0, 4096, 8, false), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, PROMPT, NP, &got);
	cluster_stop(&c);
	uint64_t h01 = link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	/* 20 prompt rows = 8 + 8 + 4 -> (3+3+2) + (3+3+2) + (3+1) = 8 frames */
	ASSERT_U64_EQ(h01, 8 + (T - 1));
}

static char moe_dir[] = "/tmp/shoal-test-dist-XXXXXX";

static const char *moe_fixture(void)
{
	static char path[512];
	const char *bdir = getenv("SHOAL_BUILDDIR");
	char *dir = moe_dir;
	if (!mkdtemp(dir))
		return NULL;
	snprintf(path, sizeof path, "%s/moe.gguf", dir);
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
	         "%s/tests/gen_fixture --arch qwen3moe --type Q8_0 --layers 4 --dim 128 --ff 256 "
	         "--heads 4 --kv-heads 2 --vocab 300 --experts 8 --experts-used 2 --ff-exp 64 "
	         "--ctx 128 --seed 11 %s >/dev/null 2>&1",
	         bdir ? bdir : ".", path);
	return system(cmd) ? NULL : path;
}

static void test_moe_experts_on_three_peers(void)
{
	const char *path = moe_fixture();
	if (!path)
		TEST_SKIP("tests/gen_fixture could not make a qwen3moe fixture");
	shoal_model *m = NULL;
	char why[256];
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	cluster c;
	const uint32_t cuts[] = {2};
	ASSERT_EQ(cluster_up(&c, m, cuts, 2, 2, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, prompt, 12, &got);
	sp = shoal_sampler_defaults();
	sp.seed = 99;
	int ok2 = ok && check_run(&c, &sp, T, prompt, 12, &got);
	cluster_stop(&c);
	/* each stage: 2 MoE layers per run; per run and layer at most one
	 * request per expert peer, each answered once */
	int counts_ok = 1;
	uint64_t total = 0;
	for (uint32_t i = 0; i < 2; i++) {
		shoal_dist_stage_metrics sm;
		shoal_dist_stage_metrics_get(c.st[i].st, &sm);
		for (uint32_t s = 0; s < 2; s++) {
			uint64_t req =
			    link_count(&c.st[i], c.ex[s].id, 1, SHOAL_XFER_KIND_EXPERT_REQ);
			uint64_t rep =
			    link_count(&c.st[i], c.ex[s].id, 0, SHOAL_XFER_KIND_EXPERT_REP);
			printf(
			    "stage %u -> expert peer %u: %llu requests in %llu runs x 2 layers\n",
			    i, s, (unsigned long long)req, (unsigned long long)sm.runs);
			if (req > sm.runs * 2 || rep != req)
				counts_ok = 0;
			total += req;
		}
		if (sm.expert_reqs > sm.runs * 2 * 2)
			counts_ok = 0;
	}
	cluster_down(&c);
	shoal_model_free(m);
	unlink(path);
	rmdir(moe_dir);
	ASSERT_TRUE(ok);
	ASSERT_TRUE(ok2);
	ASSERT_TRUE(counts_ok);
	ASSERT_GT(total, 0); /* the remote experts were used */
}

/* Wrong-digest and malformed frames injected into stage 1. */
static void test_bad_frames(void)
{
	shoal_model *m = open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, true), 0);
	shoal_xfer_link *bad = c.intruder.links[0];
	static float h[4 * 256];
	for (int i = 0; i < 4 * 256; i++)
		h[i] = 0.25f * (float)(i % 17);
	char why[256];

	/* 1. other plan: dropped by stage 1's link; a run is still exact */
	shoal_xfer_link_set_plan(bad, OTHER, EPOCH);
	shoal_xfer_row row = {.session = 0x1010101000000001ull, .pos = 0};
	shoal_xfer_hdr hd = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                     .dtype = SHOAL_XFER_DTYPE_F32,
	                     .layer_first = 0,
	                     .layer_end = 2,
	                     .dim = 256,
	                     .n_rows = 1,
	                     .rows = &row,
	                     .payload_len = 256 * 4};
	struct iovec v = {.iov_base = h, .iov_len = 256 * 4};
	ASSERT_EQ(shoal_xfer_link_send(bad, &hd, &v, 1, 1000, why, sizeof why), SHOAL_OK);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	run_out got;
	int ok1 = check_run(&c, &sp, 12, PROMPT, NP, &got);

	/* 2. a stray for an unknown session: dropped and logged */
	shoal_xfer_link_set_plan(bad, DIGEST, EPOCH);
	row.session = 0xdeadbeefull;
	ASSERT_EQ(shoal_xfer_link_send(bad, &hd, &v, 1, 1000, why, sizeof why), SHOAL_OK);

	/* 3. a malformed frame (wrong dim) for the live session: the session
	 * errors cleanly, and every token before the error is right */
	run_out want;
	ASSERT_EQ(reference(m, PROMPT, NP, 40, &sp, &want), 0);
	memset(&got, 0, sizeof got);
	shoal_dist_request rq = {.prompt = PROMPT,
	                         .n_prompt = NP,
	                         .max_tokens = 40,
	                         .logprobs = K_TOP,
	                         .sampler = sp,
	                         .on_token = collect_token,
	                         .ctx = &got};
	uint64_t sid;
	ASSERT_EQ(shoal_dist_owner_start(c.own, &rq, &sid, why, sizeof why), SHOAL_OK);
	shoal_err res = SHOAL_OK;
	bool sent_bad = false;
	for (int spin = 0; spin < 500; spin++) {
		if (shoal_dist_owner_done(c.own, sid, &res, why, sizeof why))
			break;
		ASSERT_EQ(
		    shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 20, why, sizeof why),
		    SHOAL_OK);
		if (!sent_bad && got.n >= 3) {
			row.session = sid;
			row.pos = got.n + NP - 1;
			hd.dim = 128;
			hd.payload_len = 128 * 4;
			v.iov_len = 128 * 4;
			ASSERT_EQ(shoal_xfer_link_send(bad, &hd, &v, 1, 1000, why, sizeof why),
			          SHOAL_OK);
			sent_bad = true;
		}
	}
	printf("malformed frame: session ended with %s (%s) after %u tokens\n", shoal_strerror(res),
	       why, got.n);
	int prefix_ok = got.n < 40;
	for (uint32_t t = 0; t < got.n && t < want.n; t++)
		prefix_ok &= got.id[t] == want.id[t];
	/* 4. the cluster still serves: a fresh session is exact */
	int ok4 = check_run(&c, &sp, 12, PROMPT, NP, &got);
	cluster_stop(&c);
	shoal_xfer_metrics mt;
	shoal_xfer_link_metrics(lookup(&c.st[1], c.intruder.id), &mt);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok1);
	ASSERT_TRUE(sent_bad);
	ASSERT_EQ(res, SHOAL_ERR_FORMAT);
	ASSERT_TRUE(prefix_ok);
	ASSERT_TRUE(ok4);
	ASSERT_U64_EQ(mt.rejected, 1); /* the other plan's frame */
	ASSERT_GE(sm.dropped, 2);      /* the stray and the malformed frame */
	ASSERT_U64_EQ(sm.session_errors, 1);
}

/* Decode speed for 1, 2 and 3 stages (not asserted; printed). */
static void test_decode_speed(void)
{
	shoal_model *m = open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	double base = 0;
	for (uint32_t w = 0; w <= 3; w++) { /* w = 0: warm-up (page faults) */
		uint32_t n = w ? w : 1;
		cluster c;
		const uint32_t cuts[][2] = {{0, 0}, {3, 0}, {2, 4}};
		ASSERT_EQ(
		    cluster_up(&c, m, cuts[n - 1], n, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false),
		    0);
		shoal_sampler_params sp = shoal_sampler_defaults();
		sp.temp = 0.0f;
		run_out got;
		int ok = check_run(&c, &sp, 48, PROMPT, NP, &got);
		shoal_dist_owner_metrics om;
		shoal_dist_owner_metrics_get(c.own, &om);
		cluster_down(&c);
		ASSERT_TRUE(ok);
		double us = om.steps ? om.step_ns / 1e3 / (double)om.steps : 0;
		if (!w)
			continue;
		if (n == 1)
			base = us;
		printf("%u stage(s): %.1f us per decode step, %.0f tokens/s, +%.1f us per hop\n", n,
		       us, us > 0 ? 1e6 / us : 0.0, n > 1 ? (us - base) / (n - 1) : 0.0);
	}
	shoal_model_free(m);
}

TEST_MAIN(TEST_CASE(test_dense_three_stages), TEST_CASE(test_dense_split_frames),
          TEST_CASE(test_moe_experts_on_three_peers), TEST_CASE(test_bad_frames),
          TEST_CASE(test_decode_speed))
