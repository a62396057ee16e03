/*
 * tests/unit/test_draft_model.c: the draft-model drafter
 * (runtime/engine/draft_model.h). Drafts are made with the project's own
 * tool, tests/helpers/requant: a Q8_0 copy of an F32 target, and a Q8_0
 * copy of its first 2 layers and head (--layers 2). Checked: proposals
 * equal a plain greedy run of the draft model over the same history; after
 * partial acceptance (rejected drafts rolled back), full acceptance and a
 * rewind, the drafter proposes what a fresh drafter does; a draft whose
 * vocabulary differs from the target's (in size, or in one token's
 * string) is refused at open with the difference named.
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
#include "tests/unit/test.h"
#include "tests/unit/test_fixture.h"

#define FX_TARGET                                                                                  \
	"--arch llama --type F32 --layers 4 --dim 128 --ff 256 --heads 4 --kv-heads 2 "            \
	"--vocab 300 --ctx 64 --seed 21"

static const int32_t HIST0[] = {1, 40, 41, 200, 7, 7, 123};
#define N0 ((size_t)(sizeof HIST0 / sizeof HIST0[0]))
#define K  5

/* requant's copy of the target (extra: its options), made once. */
static const char *draft_path(const char *name, const char *extra)
{
	static char path[4][512];
	static int n;
	const char *target = fx_path("target", FX_TARGET);
	if (!target)
		return NULL;
	char *p = path[n++ % 4];
	snprintf(p, 512, "%s/%s.gguf", fx_dir, name);
	if (access(p, R_OK) == 0)
		return p;
	const char *bdir = getenv("SHOAL_BUILDDIR");
	char cmd[1600];
	snprintf(cmd, sizeof cmd, "%s/tests/helpers/requant %s %s %s >/dev/null", bdir ? bdir : ".",
	         target, p, extra);
	if (system(cmd)) {
		fprintf(stderr, "failed: %s\n", cmd);
		return NULL;
	}
	return p;
}

static shoal_engine_config drafter_cfg(const shoal_model *m)
{
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = 4; /* the history goes in chunks */
	return c;
}

/* A plain greedy run of the model at path: hist as one batch, then k - 1
 * tokens fed back one at a time; out (k). */
static int greedy(const char *path, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = open_model(path);
	if (!m)
		return -1;
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 64;
	c.max_rows = 32;
	shoal_engine *e = NULL;
	uint32_t slot, pos[32], sess[32];
	uint8_t want[32] = {0};
	float *lg = malloc((size_t)m->hp.n_vocab * sizeof *lg);
	int rc = -1;
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_engine_session_open(e, &slot))
		goto out;
	for (size_t i = 0; i < n; i++) {
		pos[i] = (uint32_t)i;
		sess[i] = slot;
	}
	want[n - 1] = 1;
	shoal_engine_batch b = {.n_rows = (uint32_t)n,
	                        .tokens = hist,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = lg};
	if (shoal_engine_run(e, &b, why, sizeof why))
		goto out;
	for (size_t j = 0; j < k; j++) {
		out[j] = argmax(lg, m->hp.n_vocab);
		uint32_t p = (uint32_t)(n + j);
		uint8_t w1 = 1;
		shoal_engine_batch b1 = {.n_rows = 1,
		                         .tokens = &out[j],
		                         .session = &slot,
		                         .pos = &p,
		                         .want_logits = &w1,
		                         .logits = lg};
		if (j + 1 < k && shoal_engine_run(e, &b1, why, sizeof why))
			goto out;
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "greedy %s: %s\n", path, why);
	free(lg);
	shoal_engine_free(e);
	shoal_model_free(m);
	return rc;
}

static shoal_draft_model *open_dm(const shoal_model *target, const char *path, uint32_t sessions)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_engine_config c = drafter_cfg(target);
	c.max_sessions = sessions;
	shoal_draft_model *dm = NULL;
	if (shoal_draft_model_open(path, target, &c, &dm, why, sizeof why))
		fprintf(stderr, "open %s: %s\n", path, why);
	return dm;
}

/* The drafter over a sequence of histories against greedy runs and a
 * fresh drafter. */
static void check_draft(const char *path)
{
	ASSERT_TRUE(path != NULL);
	shoal_model *target = open_model(fx_path("target", FX_TARGET));
	ASSERT_TRUE(target != NULL);
	char why[SHOAL_WHY_LEN] = "";
	shoal_draft_model *dm = open_dm(target, path, 2);
	ASSERT_TRUE(dm != NULL);
	shoal_drafter d;
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d, why, sizeof why), SHOAL_OK);
	ASSERT_STR_EQ(d.ops->name, "draft");
	int32_t hist[64], got[K], want[K], fresh[K];
	size_t n = N0;
	memcpy(hist, HIST0, sizeof HIST0);

	/* the first proposal */
	ASSERT_EQ(d.ops->propose(d.self, hist, n, got, K), K);
	ASSERT_EQ(greedy(path, hist, n, want, K), 0);
	ASSERT_MEM_EQ(got, want, sizeof got);
	printf("  first: %d %d %d %d %d\n", got[0], got[1], got[2], got[3], got[4]);
	/* 2 of 5 accepted, then the target's own (different) choice */
	d.ops->feedback(d.self, K, 2);
	memcpy(hist + n, got, 2 * sizeof *got);
	hist[n + 2] = (got[2] + 1) % (int32_t)target->hp.n_vocab;
	n += 3;
	ASSERT_EQ(d.ops->propose(d.self, hist, n, got, K), K);
	ASSERT_EQ(greedy(path, hist, n, want, K), 0);
	ASSERT_MEM_EQ(got, want, sizeof got);
	printf("  after 2 of 5: %d %d %d %d %d\n", got[0], got[1], got[2], got[3], got[4]);
	/* a fresh drafter (the model's other session); a third is refused */
	shoal_drafter d2, d3;
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d2, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d3, why, sizeof why), SHOAL_ERR_BUSY);
	ASSERT_TRUE(strstr(why, "2 sessions are all drafting") != NULL);
	ASSERT_EQ(d2.ops->propose(d2.self, hist, n, fresh, K), K);
	ASSERT_MEM_EQ(got, fresh, sizeof got);
	d2.ops->free(d2.self);
	/* a drafter that took the prompt in first (prepare, while the target
	 * computes it) proposes what a fresh one does, for the prompt and for
	 * a longer history */
	ASSERT_EQ(shoal_draft_model_drafter(dm, &d2, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(d2.ops->prepare != NULL);
	d2.ops->prepare(d2.self, hist, n - 3);
	d2.ops->prepare(d2.self, hist, 0);  /* nothing to take in: a no-op */
	d2.ops->prepare(d2.self, hist, 65); /* past the context: ignored */
	d2.ops->prepare(d2.self, hist, n - 3);
	ASSERT_EQ(d2.ops->propose(d2.self, hist, n, fresh, K), K);
	ASSERT_MEM_EQ(got, fresh, sizeof got);
	d2.ops->free(d2.self);
	/* all accepted, plus the next */
	d.ops->feedback(d.self, K, K);
	memcpy(hist + n, got, K * sizeof *got);
	hist[n + K] = 3;
	n += K + 1;
	ASSERT_EQ(d.ops->propose(d.self, hist, n, got, 2), 2);
	ASSERT_EQ(greedy(path, hist, n, want, 2), 0);
	ASSERT_MEM_EQ(got, want, 2 * sizeof *got);
	/* none accepted: the same history again gives the same */
	d.ops->feedback(d.self, 2, 0);
	ASSERT_EQ(d.ops->propose(d.self, hist, n, fresh, 2), 2);
	ASSERT_MEM_EQ(got, fresh, 2 * sizeof *got);
	/* a rewind to the first history */
	ASSERT_EQ(d.ops->propose(d.self, HIST0, N0, got, K), K);
	ASSERT_EQ(greedy(path, HIST0, N0, want, K), 0);
	ASSERT_MEM_EQ(got, want, sizeof got);
	/* the context's end caps k; nothing for no history or k 0 */
	ASSERT_EQ(d.ops->propose(d.self, hist, 0, got, K), 0);
	ASSERT_EQ(d.ops->propose(d.self, hist, n, got, 0), 0);
	int32_t *full = calloc(64, sizeof *full);
	ASSERT_EQ(d.ops->propose(d.self, full, 62, got, K), 3);
	ASSERT_EQ(d.ops->propose(d.self, full, 64, got, K), 1);
	ASSERT_EQ(d.ops->propose(d.self, full, 65, got, K), 0);
	free(full);
	d.ops->free(d.self);
	shoal_draft_model_free(dm);
	shoal_model_free(target);
}

static void test_q8_copy(void)
{
	check_draft(draft_path("draft-q8_0", "--type Q8_0"));
}

static void test_first_layers(void)
{
	const char *p = draft_path("draft-2layers", "--type Q8_0 --layers 2");
	shoal_model *m = open_model(p);
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(m->hp.n_layer, 2);
	shoal_model_free(m);
	check_draft(p);
}

/* A copy of the target's file with one token's string changed (byte
 * token <0x41> -> <0x4G>: same length). */
static const char *patched_vocab(void)
{
	static char p[512];
	const char *src = fx_path("target", FX_TARGET);
	if (!src)
		return NULL;
	snprintf(p, sizeof p, "%s/draft-patched.gguf", fx_dir);
	FILE *f = fopen(src, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n);
	size_t got = fread(buf, 1, (size_t)n, f);
	fclose(f);
	char *hit = NULL;
	for (long i = 0; got == (size_t)n && i + 6 <= n && !hit; i++)
		if (!memcmp(buf + i, "<0x41>", 6))
			hit = buf + i;
	if (hit)
		hit[4] = 'G';
	f = hit ? fopen(p, "wb") : NULL;
	bool ok = f && fwrite(buf, 1, (size_t)n, f) == (size_t)n;
	if (f)
		ok = !fclose(f) && ok;
	free(buf);
	return ok ? p : NULL;
}

static void test_vocab_mismatch(void)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *target = open_model(fx_path("target", FX_TARGET));
	ASSERT_TRUE(target != NULL);
	shoal_engine_config c = drafter_cfg(target);
	shoal_draft_model *dm = NULL;
	/* another size */
	const char *other = fx_path("other-vocab", "--arch llama --type F32 --layers 1 --dim 64 "
	                                           "--ff 128 --heads 2 --vocab 320 --ctx 64");
	ASSERT_TRUE(other != NULL);
	ASSERT_EQ(shoal_draft_model_open(other, target, &c, &dm, why, sizeof why), SHOAL_ERR_INVAL);
	printf("  %s\n", why);
	ASSERT_TRUE(strstr(why, "320 tokens, the target's 300") != NULL);
	ASSERT_TRUE(strstr(why, "other-vocab.gguf") != NULL);
	ASSERT_TRUE(dm == NULL);
	/* the same size, one token's string differs */
	const char *patched = patched_vocab();
	ASSERT_TRUE(patched != NULL);
	ASSERT_EQ(shoal_draft_model_open(patched, target, &c, &dm, why, sizeof why),
	          SHOAL_ERR_INVAL);
	printf("  %s\n", why);
	ASSERT_TRUE(strstr(why, "token 68: '<0x4G>' in the draft model, '<0x41>' in the "
	                        "target") != NULL);
	/* not a model at all */
	ASSERT_NE(
	    shoal_draft_model_open("/nonexistent/draft.gguf", target, &c, &dm, why, sizeof why),
	    SHOAL_OK);
	ASSERT_TRUE(strstr(why, "/nonexistent/draft.gguf") != NULL);
	/* the same vocabulary passes the check */
	shoal_model *same = open_model(draft_path("draft-q8_0", "--type Q8_0"));
	ASSERT_TRUE(same != NULL);
	ASSERT_EQ(shoal_draft_vocab_check(target, same, why, sizeof why), SHOAL_OK);
	shoal_model_free(same);
	shoal_model_free(target);
}

static void test_cleanup(void)
{
	fx_cleanup();
}

TEST_MAIN(TEST_CASE(test_q8_copy), TEST_CASE(test_first_layers), TEST_CASE(test_vocab_mismatch),
          TEST_CASE(test_cleanup))
