/*
 * tests/unit/test_dist.c: distributed inference in one process: stages, expert
 * servers and the owner each on a thread, over real loopback TCP xfer
 * links. Tokens and top-K logprobs must equal one whole-model engine's
 * bitwise (dense 3-stage split, MoE with experts on 3 peers); the link
 * counters must show one HIDDEN frame per hop per step and at most one
 * expert request per remote peer per MoE layer per run; a stage run by a
 * tensor group (first or last in a pipeline) gives the same tokens with
 * the designed count of gathers; malformed and wrong-digest frames are
 * dropped and fail the session cleanly.
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
#include "runtime/dist/dist.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"
#include "tests/helpers/dist_cluster.h"
#include "tests/unit/test.h"

static const int32_t PROMPT[] = {1,   450,  338,  263, 8760, 29871, 6967,  9904,  29892, 393,
                                 263, 6114, 4223, 310, 263,  1781,  19717, 29892, 1818,  367};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

/* Run one request through the dc_cluster and the dc_reference; compare. */
/* Run rq (its tokens into *got, cleared first) through c's owner to the
 * end: 1 on success, else 0 with the reason on stderr. */
static int run_request(dc_cluster *c, shoal_dist_request *rq, dc_run_out *got)
{
	memset(got, 0, sizeof *got);
	rq->on_token = dc_collect_token;
	rq->ctx = got;
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e = shoal_dist_owner_generate(c->own, rq, c->owner.links, c->owner.n, 10000, why,
	                                        sizeof why);
	if (e)
		fprintf(stderr, "generate: %s: %s\n", shoal_strerror(e), why);
	return e == SHOAL_OK;
}

/* The austen model's two stages, cut after layer 3, 2 session slots. */
static int two_stages_up(dc_cluster *c, const shoal_model *m)
{
	const uint32_t cuts[] = {3};
	return dc_cluster_up(c, m, cuts, 2, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false);
}

static int check_run(dc_cluster *c, const shoal_sampler_params *sp, uint32_t n_gen,
                     const int32_t *prompt, uint32_t np, dc_run_out *got)
{
	dc_run_out want;
	if (dc_reference(c->m, prompt, np, n_gen, sp, &want))
		return 0;
	shoal_dist_request rq = {.prompt = prompt,
	                         .n_prompt = np,
	                         .max_tokens = n_gen,
	                         .logprobs = DC_K_TOP,
	                         .sampler = *sp};
	return run_request(c, &rq, got) && dc_same_run(&want, got);
}

/* ---- tests ---------------------------------------------------------------------------- */

static void test_dense_three_stages(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, PROMPT, NP, &got);
	/* temperature, top-k/p, min-p and a repetition penalty, seeded */
	sp = shoal_sampler_defaults();
	sp.seed = 1234;
	sp.temp = 1.1f;
	sp.repeat_penalty = 1.1f;
	int ok2 = ok && check_run(&c, &sp, T, PROMPT, NP, &got);
	dc_cluster_stop(&c);
	/* per hop: 2 prefill frames (one per request) + (T - 1) decode steps each */
	uint64_t hops = 2 * (1 + (T - 1));
	uint64_t h01 = dc_link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	uint64_t h12 = dc_link_count(&c.st[1], c.st[2].id, 1, SHOAL_XFER_KIND_HIDDEN);
	uint64_t h12r = dc_link_count(&c.st[2], c.st[1].id, 0, SHOAL_XFER_KIND_HIDDEN);
	/* owner -> stage 0: prefill + (T - 1) ids, and open + close in their
	 * own kind, per request */
	uint64_t t0 = dc_link_count(&c.owner, c.st[0].id, 1, SHOAL_XFER_KIND_TOKEN);
	uint64_t c0 = dc_link_count(&c.owner, c.st[0].id, 1, SHOAL_XFER_KIND_SESSION);
	/* last -> owner: exactly one result frame per generated token */
	uint64_t t2 = dc_link_count(&c.st[2], c.owner.id, 1, SHOAL_XFER_KIND_TOKEN);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	shoal_xfer_metrics lm;
	shoal_xfer_link_metrics(dc_lookup(&c.st[1], c.st[2].id), &lm);
	uint64_t hb = sm.hidden_bytes, hb_link = lm.bytes_sent[SHOAL_XFER_KIND_HIDDEN];
	printf("dense 3 stages: stage 1 ran %llu steps, last %.1f us, mean %.1f us\n",
	       (unsigned long long)sm.runs, sm.last_run_ns / 1e3,
	       sm.runs ? sm.run_ns / 1e3 / (double)sm.runs : 0.0);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_TRUE(ok2);
	ASSERT_U64_EQ(h01, hops);
	ASSERT_U64_EQ(hb, hb_link); /* the stage's own byte count agrees with the link's */
	ASSERT_GT(hb, 0);
	ASSERT_U64_EQ(h12, hops);
	ASSERT_U64_EQ(h12r, hops);
	ASSERT_U64_EQ(t0, 2 * (1 + (T - 1)));
	ASSERT_U64_EQ(c0, 2 * 2);
	ASSERT_U64_EQ(t2, 2 * T);
}

/* A stage run by a tensor group, in a pipeline: (1) stage 1 of 2 a group
 * of 2 (weights 3 : 1) that splits the head, whose second member gathers
 * the logits (one slice from the other member per run with logits: one a
 * token) and samples; (2) stage 0 of 2 a
 * group of 3 (2 : 1 : 1) whose entry passes hidden states on, over links
 * of 4 KiB so that the larger slices go in pieces. Tokens and logprobs
 * equal one engine's; every member takes part in 4 all-gathers a layer a
 * run and sends one slice to each other member in each. */
static void test_group_stages(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	static const uint64_t w2[2] = {3, 1}, w3[3] = {2, 1, 1};
	const uint32_t cut2[] = {2}, cut4[] = {4};
	for (int k = 0; k < 2; k++) {
		dc_cluster c;
		uint32_t n = k ? 3 : 2, st = k ? 0 : 1, layers = 4; /* in the group's stage */
		ASSERT_EQ(dc_cluster_up_group(&c, m, k ? cut4 : cut2, 2, st, k ? w3 : w2, n,
		                              k ? 4096 : SHOAL_XFER_MAX_FRAME_DEFAULT),
		          0);
		dc_run_out got;
		int ok = check_run(&c, &sp, 12, PROMPT, NP, &got);
		dc_cluster_stop(&c);
		shoal_dist_stage_metrics me[4];
		shoal_dist_stage_metrics_get(c.st[st].st, &me[0]);
		for (uint32_t j = 1; j < n; j++)
			shoal_dist_stage_metrics_get(c.tp[j - 1].st, &me[j]);
		printf(
		    "group of %u at stage %u: %llu runs, %llu gathers, %llu slices and %llu frames "
		    "sent by the entry, mean wait %.1f us\n",
		    n, st, (unsigned long long)me[0].runs, (unsigned long long)me[0].gathers,
		    (unsigned long long)me[0].gather_sent,
		    (unsigned long long)me[0].gather_frames_sent,
		    me[0].gathers ? me[0].gather_wait_ns / 1e3 / (double)me[0].gathers : 0.0);
		dc_cluster_down(&c);
		ASSERT_TRUE(ok);
		for (uint32_t j = 0; j < n; j++) {
			ASSERT_GT(me[j].runs, 0);
			ASSERT_U64_EQ(me[j].runs, me[0].runs);
			ASSERT_U64_EQ(me[j].gathers, me[j].runs * layers * 4);
			ASSERT_U64_EQ(me[j].gather_sent, me[j].gathers * (n - 1));
			ASSERT_U64_EQ(me[j].gather_recv, me[j].gather_sent);
			ASSERT_U64_EQ(me[j].session_errors, 0);
		}
		if (k) { /* 4 KiB links: the FFN slices of the prefill go in pieces */
			ASSERT_GT(me[0].gather_frames_sent, me[0].gather_sent);
			for (uint32_t j = 0; j < n; j++) /* not the last stage: no head */
				ASSERT_U64_EQ(me[j].head_gathers, 0);
		} else { /* the head: one gather a token, member 0's slice to 1 */
			ASSERT_U64_EQ(me[0].gather_frames_sent,
			              me[0].gather_sent + me[0].head_sent);
			ASSERT_GT(me[1].tokens_sent, 0);
			ASSERT_U64_EQ(me[1].head_gathers, me[1].tokens_sent);
			ASSERT_U64_EQ(me[0].head_gathers, me[1].head_gathers);
			ASSERT_U64_EQ(me[0].head_sent, me[0].head_gathers);
			ASSERT_U64_EQ(me[0].head_recv, 0);
			ASSERT_U64_EQ(me[1].head_recv, me[1].head_gathers * (n - 1));
			ASSERT_U64_EQ(me[1].head_sent, 0);
		}
		ASSERT_U64_EQ(me[0].relayed % (n - 1), 0); /* each frame to every other member */
		ASSERT_GT(me[0].relayed, 0);
	}
	shoal_model_free(m);
}

/* F32 weights; prompt in frames of 8 rows, links of 4 KiB: each prefill
 * frame's hidden states (8 x 1040 bytes) go as 3 + 3 + 2 rows. */
static void test_dense_split_frames(void)
{
	shoal_model *m = dc_open_model("austen-dense-f32.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {3};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 2, 0, 4096, 8, false), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, PROMPT, NP, &got);
	dc_cluster_stop(&c);
	uint64_t h01 = dc_link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	/* 20 prompt rows in owner frames of 8 + 8 + 4: run one by one, (3+3+2)
	 * + (3+3+2) + (3+1) = 8 hidden frames; batched (they arrive together),
	 * 20 rows = 7 frames of 3; then one per decode step */
	ASSERT_GE(h01, 7 + (T - 1));
	ASSERT_LE(h01, 8 + (T - 1));
}

static char moe_dir[] = "/tmp/shoal-test-dist-XXXXXX";

static const char *moe_fixture(void)
{
	static char path[512];
	const char *bdir = getenv("SHOAL_BUILDDIR");
	char *dir = moe_dir;
	strcpy(moe_dir + sizeof moe_dir - 7, "XXXXXX"); /* mkdtemp filled it before */
	if (!mkdtemp(dir))
		return NULL;
	snprintf(path, sizeof path, "%s/moe.gguf", dir);
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch qwen3moe --type Q8_0 --layers 4 --dim 128 "
	         "--ff 256 "
	         "--heads 4 --kv-heads 2 --vocab 300 --experts 8 --experts-used 2 --ff-exp 64 "
	         "--ctx 128 --seed 11 %s >/dev/null 2>&1",
	         bdir ? bdir : ".", path);
	return system(cmd) ? NULL : path;
}

static void test_moe_experts_on_three_peers(void)
{
	const char *path = moe_fixture();
	if (!path)
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3moe fixture");
	shoal_model *m = NULL;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	dc_cluster c;
	const uint32_t cuts[] = {2};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 2, 2, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out got;
	const uint32_t T = 24;
	int ok = check_run(&c, &sp, T, prompt, 12, &got);
	sp = shoal_sampler_defaults();
	sp.seed = 99;
	int ok2 = ok && check_run(&c, &sp, T, prompt, 12, &got);
	dc_cluster_stop(&c);
	/* each stage: 2 MoE layers per run; per run and layer at most one
	 * request per expert dc_peer, each answered once */
	int counts_ok = 1;
	uint64_t total = 0;
	for (uint32_t i = 0; i < 2; i++) {
		shoal_dist_stage_metrics sm;
		shoal_dist_stage_metrics_get(c.st[i].st, &sm);
		for (uint32_t s = 0; s < 2; s++) {
			uint64_t req =
			    dc_link_count(&c.st[i], c.ex[s].id, 1, SHOAL_XFER_KIND_EXPERT_REQ);
			uint64_t rep =
			    dc_link_count(&c.st[i], c.ex[s].id, 0, SHOAL_XFER_KIND_EXPERT_REP);
			printf("stage %u -> expert peer %u: %llu requests in %llu runs x 2 "
			       "layers\n",
			       i, s, (unsigned long long)req, (unsigned long long)sm.runs);
			if (req > sm.runs * 2 || rep != req)
				counts_ok = 0;
			total += req;
		}
		if (sm.expert_reqs > sm.runs * 2 * 2)
			counts_ok = 0;
	}
	dc_cluster_down(&c);
	shoal_model_free(m);
	unlink(path);
	rmdir(moe_dir);
	ASSERT_TRUE(ok);
	ASSERT_TRUE(ok2);
	ASSERT_TRUE(counts_ok);
	ASSERT_GT(total, 0); /* the remote experts were used */
}

/* Stages split inside their peers (shoal_dist_stage_config.device_end: a
 * stage boundary without a hop, two engines passing hidden states in
 * memory): a dense model in 2 stages split at layers 1 and L/2 + 1, and
 * the MoE fixture in 2 stages split at 1 and 3 with an expert server,
 * give one engine's tokens and logprobs, greedy and seeded; no extra
 * hidden frame crosses a link. */
static void test_device_split(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	uint32_t L = m->hp.n_layer, cuts[] = {L / 2}, split[] = {1, L / 2 + 1};
	dc_device_end = split;
	dc_backend = "cpu";
	dc_cluster c;
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 2, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	dc_run_out got;
	const uint32_t T = 16;
	int ok = check_run(&c, &sp, T, PROMPT, NP, &got);
	sp = shoal_sampler_defaults();
	sp.seed = 77;
	int ok2 = ok && check_run(&c, &sp, T, PROMPT, NP, &got);
	dc_cluster_stop(&c);
	uint64_t h01 = dc_link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_TRUE(ok2);
	ASSERT_U64_EQ(h01, 2 * T);

	const char *path = moe_fixture();
	if (!path) {
		dc_device_end = NULL;
		TEST_SKIP("tests/helpers/gen_fixture could not make a qwen3moe fixture");
	}
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(path, &m, why, sizeof why), SHOAL_OK);
	const uint32_t mcuts[] = {2}, msplit[] = {1, 3};
	dc_device_end = msplit;
	ASSERT_EQ(dc_cluster_up(&c, m, mcuts, 2, 1, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	const int32_t prompt[] = {1, 17, 250, 3, 99, 42, 7, 7, 120, 64, 5, 298};
	sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	ok = check_run(&c, &sp, T, prompt, 12, &got);
	dc_cluster_down(&c);
	dc_device_end = NULL;
	dc_backend = NULL;
	shoal_model_free(m);
	unlink(path);
	rmdir(moe_dir);
	ASSERT_TRUE(ok);
}

/* Wrong-digest and malformed frames injected into stage 1. */
static void test_bad_frames(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, true), 0);
	shoal_xfer_link *bad = c.intruder.links[0];
	static float h[4 * 256];
	for (int i = 0; i < 4 * 256; i++)
		h[i] = 0.25f * (float)(i % 17);
	char why[SHOAL_WHY_LEN];

	/* 1. other plan: dropped by stage 1's link; a run is still exact */
	shoal_xfer_link_set_plan(bad, DC_OTHER, DC_EPOCH);
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
	dc_run_out got;
	int ok1 = check_run(&c, &sp, 12, PROMPT, NP, &got);

	/* 2. a stray for an unknown session: dropped and logged */
	shoal_xfer_link_set_plan(bad, DC_DIGEST, DC_EPOCH);
	row.session = 0xdeadbeefull;
	ASSERT_EQ(shoal_xfer_link_send(bad, &hd, &v, 1, 1000, why, sizeof why), SHOAL_OK);

	/* 3. during a session: after 2 tokens, a well-formed frame of the live
	 * session at its next position, but of another plan on a link that is
	 * on that plan: the stage refuses it (a run of it would rewind the
	 * session onto garbage); after 5, a malformed frame (wrong dim): the
	 * session errors cleanly, and every token before the error is right */
	dc_run_out want;
	ASSERT_EQ(dc_reference(m, PROMPT, NP, 40, &sp, &want), 0);
	memset(&got, 0, sizeof got);
	shoal_dist_request rq = {.prompt = PROMPT,
	                         .n_prompt = NP,
	                         .max_tokens = 40,
	                         .logprobs = DC_K_TOP,
	                         .sampler = sp,
	                         .on_token = dc_collect_token,
	                         .ctx = &got};
	uint64_t sid;
	ASSERT_EQ(shoal_dist_owner_start(c.own, &rq, &sid, why, sizeof why), SHOAL_OK);
	shoal_err res = SHOAL_OK;
	bool sent_bad = false, sent_other = false;
	for (int spin = 0; spin < 500; spin++) {
		if (shoal_dist_owner_done(c.own, sid, &res, why, sizeof why))
			break;
		ASSERT_EQ(
		    shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 20, why, sizeof why),
		    SHOAL_OK);
		if (!sent_other && got.n >= 2) {
			row.session = sid;
			row.pos = got.n + NP - 1;
			ASSERT_EQ(shoal_xfer_link_send(c.intruder.links[1], &hd, &v, 1, 1000, why,
			                               sizeof why),
			          SHOAL_OK);
			sent_other = true;
		}
		if (!sent_bad && got.n >= 5) {
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
		prefix_ok &= got.id[t] == want.id[t] && !memcmp(&got.lp[t], &want.lp[t], 4);
	/* 4. the cluster still serves: a fresh session is exact */
	int ok4 = check_run(&c, &sp, 12, PROMPT, NP, &got);
	dc_cluster_stop(&c);
	shoal_xfer_metrics mt;
	shoal_xfer_link_metrics(dc_lookup(&c.st[1], c.intruder.id), &mt);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok1);
	ASSERT_TRUE(sent_bad);
	ASSERT_TRUE(sent_other);
	ASSERT_EQ(res, SHOAL_ERR_FORMAT);
	ASSERT_TRUE(prefix_ok);
	ASSERT_TRUE(ok4);
	ASSERT_U64_EQ(mt.rejected, 1); /* the other plan's frame */
	ASSERT_GE(sm.dropped, 3);      /* the stray, the other plan's and the malformed frame */
	ASSERT_U64_EQ(sm.session_errors, 1);
}

/* Two sessions of one owner in flight at once through 3 stages, one
 * greedy, one seeded: each is exact. */
static void test_two_sessions_interleaved(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	const uint32_t cuts[] = {2, 4};
	ASSERT_EQ(dc_cluster_up(&c, m, cuts, 3, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false), 0);
	shoal_sampler_params sp[2] = {shoal_sampler_defaults(), shoal_sampler_defaults()};
	sp[0].temp = 0.0f;
	sp[1].seed = 77;
	const uint32_t np[2] = {NP, NP - 7}, T = 20;
	static dc_run_out want[2], got[2];
	uint64_t sid[2];
	shoal_err res[2] = {SHOAL_ERR_STATE, SHOAL_ERR_STATE};
	bool done[2] = {false, false};
	char why[SHOAL_WHY_LEN];
	int ok = 1;
	for (int q = 0; q < 2; q++) {
		ok &= dc_reference(m, PROMPT + (NP - np[q]), np[q], T, &sp[q], &want[q]) == 0;
		memset(&got[q], 0, sizeof got[q]);
		shoal_dist_request rq = {.prompt = PROMPT + (NP - np[q]),
		                         .n_prompt = np[q],
		                         .max_tokens = T,
		                         .logprobs = DC_K_TOP,
		                         .sampler = sp[q],
		                         .on_token = dc_collect_token,
		                         .ctx = &got[q]};
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
	/* at most one frame per session per step; fewer when rows batched */
	uint64_t h01 = dc_link_count(&c.st[0], c.st[1].id, 1, SHOAL_XFER_KIND_HIDDEN);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	printf("two sessions: %llu hidden frames into stage 1, %llu runs of %llu rows there\n",
	       (unsigned long long)h01, (unsigned long long)sm.runs, (unsigned long long)sm.rows);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	ASSERT_LE(h01, 2 * T);
	ASSERT_EQ(res[0], SHOAL_OK);
	ASSERT_EQ(res[1], SHOAL_OK);
	ASSERT_NE(sid[0], sid[1]);
	ASSERT_TRUE(dc_same_run(&want[0], &got[0]));
	ASSERT_TRUE(dc_same_run(&want[1], &got[1]));
}

/* A replay (what an owner sends on a new plan): the prompt plus the first
 * k tokens as the prompt, first_step = k. The rest of the run equals the
 * undisturbed run's steps k.. bitwise, greedy and seeded alike. */
static void test_replay_continues(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	ASSERT_EQ(two_stages_up(&c, m), 0);
	const uint32_t T = 24, k = 9;
	int ok = 1;
	for (int mode = 0; mode < 2; mode++) {
		shoal_sampler_params sp = shoal_sampler_defaults();
		if (mode == 0)
			sp.temp = 0.0f;
		else
			sp.seed = 1234, sp.repeat_penalty = 1.1f; /* the tail carries the history */
		static dc_run_out want, got;
		int32_t hist[NP + DC_MAX_TOK];
		ok &= dc_reference(m, PROMPT, NP, T, &sp, &want) == 0;
		memcpy(hist, PROMPT, sizeof PROMPT);
		memcpy(hist + NP, want.id, k * sizeof *hist);
		shoal_dist_request rq = {.prompt = hist,
		                         .n_prompt = NP + k,
		                         .max_tokens = T - k,
		                         .logprobs = DC_K_TOP,
		                         .first_step = k,
		                         .sampler = sp};
		ok &= run_request(&c, &rq, &got) && got.n == T - k;
		for (uint32_t t = 0; ok && t < T - k; t++)
			ok &= got.id[t] == want.id[k + t] && got.lp[t] == want.lp[k + t];
		printf("replay from step %u (%s): %u tokens %s the undisturbed run's\n", k,
		       mode ? "seeded, repeat penalty" : "greedy", got.n,
		       ok ? "equal" : "DIFFER from");
	}
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
}

/* The prefix cache (issue 37): a conversation's next request, whose prompt
 * is the last one's prompt and reply and more, starts after the blocks
 * every stage kept (3 stages count the hit and the positions), and its
 * tokens, logprobs and top pairs equal a whole-model engine's from
 * scratch, greedy and seeded; a prompt that leaves the kept ids in the
 * middle of a block reuses only the whole blocks before it. */
static uint32_t cached_seen;
static int collect_cached(void *ctx, const shoal_dist_token *t)
{
	cached_seen = t->cached;
	return dc_collect_token(ctx, t);
}

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
	enum { T1 = 30, T2 = 12, EXTRA = 5 };
	static dc_run_out want, got;
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	int ok = check_run(&c, &sp, T1, PROMPT, NP, &got);
	/* turn 2: the prompt, the reply fed (T1 - 1 ids: the last is never
	 * fed), then EXTRA more: 54 ids; the first turn fed 49, 3 blocks */
	int32_t hist[NP + T1 + EXTRA];
	memcpy(hist, PROMPT, sizeof PROMPT);
	memcpy(hist + NP, got.id, (T1 - 1) * sizeof *hist);
	memcpy(hist + NP + T1 - 1, PROMPT, EXTRA * sizeof *hist);
	uint32_t n2 = NP + T1 - 1 + EXTRA;
	const uint32_t want_cached[3] = {48, 48, 32};
	for (int r = 0; r < 3; r++) {
		shoal_sampler_params s2 = shoal_sampler_defaults();
		if (r == 0)
			s2.temp = 0.0f;
		else
			s2.seed = 77;
		if (r == 2) /* diverges at 40, inside block 2 ([32, 48)) */
			hist[40] = hist[40] == 13 ? 14 : 13;
		ok &= dc_reference(m, hist, n2, T2, &s2, &want) == 0;
		shoal_dist_request rq = {.prompt = hist,
		                         .n_prompt = n2,
		                         .max_tokens = T2,
		                         .logprobs = DC_K_TOP,
		                         .sampler = s2};
		memset(&got, 0, sizeof got);
		rq.on_token = collect_cached;
		rq.ctx = &got;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_dist_owner_generate(c.own, &rq, c.owner.links, c.owner.n, 10000,
		                                        why, sizeof why);
		ok &= e == SHOAL_OK && dc_same_run(&want, &got) && cached_seen == want_cached[r];
		printf("turn %d (%s): %u of %u prompt ids cached (want %u), %u tokens %s\n", r + 2,
		       r ? "seeded" : "greedy", cached_seen, n2, want_cached[r], got.n,
		       e == SHOAL_OK && dc_same_run(&want, &got) ? "equal the reference's"
		                                                 : "DIFFER");
	}
	/* The last turn's CLOSE may still be on its way down the pipeline when
	 * its tokens are in (it failed under ASan: the last stage had kept
	 * nothing yet). A short unrelated request's OPEN follows it on every
	 * link, so once that request is done every stage has kept the KV. */
	static const int32_t SHORT[4] = {5, 6, 7, 8};
	shoal_dist_request rs = {.prompt = SHORT,
	                         .n_prompt = 4,
	                         .max_tokens = 2,
	                         .sampler = sp,
	                         .on_token = dc_collect_token,
	                         .ctx = &got};
	memset(&got, 0, sizeof got);
	char ws[SHOAL_WHY_LEN] = "";
	ok &= shoal_dist_owner_generate(c.own, &rs, c.owner.links, c.owner.n, 10000, ws,
	                                sizeof ws) == SHOAL_OK;
	dc_cluster_stop(&c); /* the stage threads are joined: their counters hold still */
	for (uint32_t i = 0; i < 3; i++) {
		shoal_dist_stage_metrics sm;
		shoal_dist_stage_metrics_get(c.st[i].st, &sm);
		printf("stage %u: %llu hits, %llu positions reused, %llu kept\n", i,
		       (unsigned long long)sm.prefix_hits, (unsigned long long)sm.prefix_hit_tokens,
		       (unsigned long long)sm.prefix_entries);
		ok &= sm.prefix_hits == 3 && sm.prefix_hit_tokens == 48 + 48 + 32;
		ok &= sm.prefix_entries >= 1;
	}
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
}

/* Start a greedy request of 40 tokens on c's owner, its tokens into *sink
 * (cleared first). */
static shoal_err start_greedy(dc_cluster *c, dc_run_out *sink, uint64_t *sid, char *why,
                              size_t why_len)
{
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	memset(sink, 0, sizeof *sink);
	shoal_dist_request rq = {.prompt = PROMPT,
	                         .n_prompt = NP,
	                         .max_tokens = 40,
	                         .sampler = sp,
	                         .on_token = dc_collect_token,
	                         .ctx = sink};
	return shoal_dist_owner_start(c->own, &rq, sid, why, why_len);
}

/* A cancelled session frees its owner slot and, through CLOSE, its stage
 * slots: five cancels in a row on 2 slots, then a whole run is exact. */
static void test_cancel_frees_slots(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	ASSERT_EQ(two_stages_up(&c, m), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;
	char why[SHOAL_WHY_LEN];
	int ok = 1;
	static dc_run_out sink;
	for (int i = 0; i < 5; i++) {
		uint64_t sid = 0;
		shoal_err e = start_greedy(&c, &sink, &sid, why, sizeof why);
		if (e)
			fprintf(stderr, "start %d: %s\n", i, why);
		ok &= e == SHOAL_OK;
		for (int spin = 0; spin < 3; spin++)
			shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 5, why, sizeof why);
		shoal_dist_owner_cancel(c.own, sid);
		shoal_err res;
		ok &= shoal_dist_owner_done(c.own, sid, &res, why, sizeof why) &&
		      res == SHOAL_ERR_NOTFOUND;
	}
	dc_run_out got;
	ok &= check_run(&c, &sp, 12, PROMPT, NP, &got);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
}

/* no_logprob: with K = 0 the last stage skips the sampled id's logprob
 * (it reads 0) and the tokens are the reference's; without the flag, or
 * with K > 0, the logprob is the reference's, bit for bit. */
static void test_no_logprob(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	ASSERT_EQ(two_stages_up(&c, m), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.seed = 77;
	sp.temp = 0.9f;
	const uint32_t T = 10;
	static dc_run_out want, got[3];
	int ok = dc_reference(m, PROMPT, NP, T, &sp, &want) == 0;
	const struct {
		uint32_t k;
		bool no_lp;
	} cases[3] = {{0, true}, {0, false}, {DC_K_TOP, true}};
	for (int i = 0; i < 3 && ok; i++) {
		shoal_dist_request rq = {.prompt = PROMPT,
		                         .n_prompt = NP,
		                         .max_tokens = T,
		                         .logprobs = cases[i].k,
		                         .no_logprob = cases[i].no_lp,
		                         .sampler = sp};
		ok &= run_request(&c, &rq, &got[i]) && got[i].n == T;
	}
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(ok);
	for (uint32_t t = 0; t < T; t++) {
		ASSERT_EQ(got[0].id[t], want.id[t]);
		ASSERT_TRUE(got[0].lp[t] == 0.0f);
		ASSERT_EQ(got[1].id[t], want.id[t]);
		ASSERT_TRUE(!memcmp(&got[1].lp[t], &want.lp[t], 4));
		ASSERT_TRUE(want.lp[t] < 0.0f);
	}
	ASSERT_TRUE(dc_same_run(&want, &got[2]));
}

/* A stage that frees a live session because its view lost the owner for
 * a moment (shoal_dist_stage_keep_owners) and then gets the session's next
 * row tells the owner (NOTFOUND, which a node replays) instead of dropping
 * the row unseen and leaving the owner waiting. The stage threads are
 * stopped and the peers polled here, one after another, so that the
 * session is freed between two of its steps. */
static void test_freed_session_tells_owner(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	ASSERT_EQ(two_stages_up(&c, m), 0);
	char why[SHOAL_WHY_LEN] = "";
	static dc_run_out got;
	uint64_t sid = 0;
	ASSERT_EQ(start_greedy(&c, &got, &sid, why, sizeof why), SHOAL_OK);
	for (int spin = 0; spin < 500 && got.n < 3; spin++)
		shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 20, why, sizeof why);
	dc_cluster_stop(&c);
	uint32_t n_before = got.n;
	/* the last stage's view has no owner now */
	uint32_t freed = shoal_dist_stage_keep_owners(c.st[1].st, NULL, 0);
	shoal_err res = SHOAL_OK;
	bool done = false;
	for (int spin = 0; spin < 300 && !done; spin++) {
		for (uint32_t i = 0; i < 2; i++)
			shoal_dist_stage_poll(c.st[i].st, c.st[i].links, c.st[i].n, 2, why,
			                      sizeof why);
		shoal_dist_owner_poll(c.own, c.owner.links, c.owner.n, 2, why, sizeof why);
		done = shoal_dist_owner_done(c.own, sid, &res, why, sizeof why);
	}
	printf("freed %u session(s) after %u tokens; owner: %s (%s) after %u tokens\n", freed,
	       n_before, done ? shoal_strerror(res) : "still waiting", done ? why : "", got.n);
	shoal_dist_stage_metrics sm;
	shoal_dist_stage_metrics_get(c.st[1].st, &sm);
	dc_cluster_down(&c);
	shoal_model_free(m);
	ASSERT_TRUE(n_before >= 3 && n_before < 40);
	ASSERT_EQ(freed, 1);
	ASSERT_TRUE(done);
	ASSERT_EQ(res, SHOAL_ERR_NOTFOUND);
	ASSERT_TRUE(strstr(why, "freed here") != NULL);
	ASSERT_U64_EQ(sm.session_errors, 1);
}

/* Structured output's checks: a malformed grammar is refused by the
 * owner before anything is sent; a well-formed one reaches the last
 * stage, which has no tokenizer here (the node gives it one), so the
 * session fails with that reason instead of sampling unconstrained. */
static void test_grammar_refusals(void)
{
	shoal_model *m = dc_open_model("austen-dense-q8_0.gguf");
	ASSERT_TRUE(m != NULL);
	dc_cluster c;
	ASSERT_EQ(two_stages_up(&c, m), 0);
	shoal_sampler_params sp = shoal_sampler_defaults();
	uint32_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	sp.grammar = junk;
	sp.n_grammar = 8;
	dc_run_out got = {0};
	shoal_dist_request rq = {.prompt = PROMPT,
	                         .n_prompt = NP,
	                         .max_tokens = 4,
	                         .sampler = sp,
	                         .on_token = dc_collect_token,
	                         .ctx = &got};
	char why[SHOAL_WHY_LEN] = "";
	uint64_t sid;
	shoal_err e1 = shoal_dist_owner_start(c.own, &rq, &sid, why, sizeof why);
	char why1[SHOAL_WHY_LEN];
	snprintf(why1, sizeof why1, "%s", why);
	shoal_grammar_prog g = {0};
	ASSERT_EQ(shoal_grammar_json_object(&g, why, sizeof why), SHOAL_OK);
	rq.sampler.grammar = g.w;
	rq.sampler.n_grammar = g.n;
	why[0] = 0;
	shoal_err e2 =
	    shoal_dist_owner_generate(c.own, &rq, c.owner.links, c.owner.n, 10000, why, sizeof why);
	dc_cluster_down(&c);
	shoal_model_free(m);
	free(g.w);
	ASSERT_EQ(e1, SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why1, "grammar") != NULL);
	ASSERT_EQ(e2, SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "tokenizer") != NULL);
	ASSERT_EQ(got.n, 0);
}

TEST_MAIN(TEST_CASE(test_dense_three_stages), TEST_CASE(test_group_stages),
          TEST_CASE(test_dense_split_frames), TEST_CASE(test_moe_experts_on_three_peers),
          TEST_CASE(test_bad_frames), TEST_CASE(test_two_sessions_interleaved),
          TEST_CASE(test_replay_continues), TEST_CASE(test_prefix_cache),
          TEST_CASE(test_cancel_frees_slots), TEST_CASE(test_no_logprob),
          TEST_CASE(test_freed_session_tells_owner), TEST_CASE(test_device_split),
          TEST_CASE(test_grammar_refusals))
