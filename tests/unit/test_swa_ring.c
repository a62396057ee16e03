/*
 * tests/unit/test_swa_ring.c: a sliding layer's KV memory is its window.
 * On a gpt-oss fixture (window 8, 4 layers: 0 and 2 slide, contexts well
 * past the window) an engine whose sliding layers keep rings of window +
 * max_rows positions gives bitwise the logits of one that keeps every
 * layer's whole context (config kv_full), through prefill chunks of
 * several rows, speculation's rewinds and a long decode, with an F16 and
 * an F32 cache; a rewind farther than the ring holds is refused and
 * reported by shoal_engine_session_reusable, and starting again from 0
 * gives the bits again; the engine's KV bytes are full layers x n_ctx +
 * sliding layers x ring (a session of n positions holds n of a full
 * layer, at most the ring of a sliding one: what the prefix cache counts),
 * and the scheduler's manifest counts them alike.
 *
 * Part: tests of runtime/ (engine, cpu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/manifest.h"
#include "models/model.h"
#include "runtime/backends.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/engine.h"
#include "tests/unit/test.h"

#define WINDOW 8
#define LAYERS 4
#define VOCAB  300
#define CTX    256
#define ROWS   8            /* max_rows: the rings hold WINDOW + ROWS positions */
#define KVROW  (2 * 2 * 16) /* K and V, 2 KV heads of 16 */

static char path[] = "/tmp/shoal-test-swa-XXXXXX.gguf";
static bool made; /* path holds the fixture */

static shoal_model *fixture(void)
{
	const char *bdir = getenv("SHOAL_BUILDDIR");
	char cmd[1024], why[SHOAL_WHY_LEN] = "";
	shoal_model *m = NULL;
	if (made)
		return shoal_model_open(path, &m, why, sizeof why) ? NULL : m;
	int fd = mkstemps(path, 5);
	if (fd < 0)
		return NULL;
	close(fd);
	made = true;
	snprintf(cmd, sizeof cmd,
	         "%s/tests/helpers/gen_fixture --arch gpt-oss --type F32 --layers %d --dim 64 "
	         "--heads 4 --kv-heads 2 --head-dim 16 --vocab %d --experts 4 --experts-used 2 "
	         "--ff-exp 32 --ctx %d --seed 5 --window %d %s",
	         bdir ? bdir : ".", LAYERS, VOCAB, CTX, WINDOW, path);
	if (system(cmd) || shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "fixture: %s %s\n", cmd, why);
		return NULL;
	}
	return m;
}

/* The backend the engines of test_bitwise compute on (the CPU's if NULL). */
static const shoal_backend_ops *g_ops;

static shoal_engine *engine(const shoal_model *m, shoal_dtype kv, bool full)
{
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = g_ops ? g_ops : shoal_backend_cpu();
	cfg.kv_type = kv;
	cfg.n_ctx = CTX;
	cfg.max_rows = ROWS;
	cfg.max_sessions = 2;
	cfg.kv_full = full;
	shoal_engine *e = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_engine_new(m, &cfg, &e, why, sizeof why)) {
		fprintf(stderr, "engine: %s\n", why);
		return NULL;
	}
	return e;
}

/* The id fed at position p (a fixed pseudo-random stream) and, for a draft
 * that is then rejected, another one. */
static int32_t tok_at(uint32_t p, uint32_t salt)
{
	uint32_t x = (p + 1) * 2654435761u ^ salt * 40503u;
	x ^= x >> 13;
	return (int32_t)(x % VOCAB);
}

/* Rows [p, p + n) of slot into e with logits into out (n, VOCAB); salt picks
 * the ids. Returns the engine's error. */
static shoal_err run_rows(shoal_engine *e, uint32_t slot, uint32_t p, uint32_t n, uint32_t salt,
                          float *out)
{
	int32_t ids[ROWS];
	uint32_t sess[ROWS], pos[ROWS];
	uint8_t want[ROWS];
	for (uint32_t r = 0; r < n; r++)
		ids[r] = tok_at(p + r, salt), sess[r] = slot, pos[r] = p + r, want[r] = 1;
	shoal_engine_batch b = {.n_rows = n,
	                        .tokens = ids,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = out};
	char why[SHOAL_WHY_LEN] = "";
	shoal_err err = shoal_engine_run(e, &b, why, sizeof why);
	if (err && err != SHOAL_ERR_RANGE)
		fprintf(stderr, "run: %s\n", why);
	return err;
}

/* One script on both engines: prefill in chunks of 5, 8 and 3 rows, then
 * steps of a fed token and drafts (up to 8 rows) of which a varying number
 * are kept (the rest rewound and overwritten by the next step's ids), then
 * plain decoding, to 200 positions (25 windows). Every row's logits
 * compared bitwise. On the CPU backend and, where there is a device, on the
 * Vulkan backend (lavapipe in make check): rings against its own whole
 * planes. */
static void bitwise_on(const char *name);

static void test_bitwise(void)
{
	g_ops = NULL;
	bitwise_on("cpu");
	const shoal_backend_ops *vk = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_backend_pick(&(shoal_backend_opts){.name = "vulkan"}, &vk, why, sizeof why)) {
		printf("vulkan: not checked here (%s)\n", why);
		return;
	}
	g_ops = vk;
	bitwise_on("vulkan");
	g_ops = NULL;
}

static void bitwise_on(const char *name)
{
	shoal_model *m = fixture();
	ASSERT_TRUE(m != NULL);
	const shoal_dtype kvs[2] = {SHOAL_DTYPE_F16, SHOAL_DTYPE_F32};
	float *a = malloc(ROWS * VOCAB * sizeof *a), *b = malloc(ROWS * VOCAB * sizeof *b);
	ASSERT_TRUE(a && b);
	for (int k = 0; k < 2; k++) {
		shoal_engine *er = engine(m, kvs[k], false), *ef = engine(m, kvs[k], true);
		ASSERT_TRUE(er && ef);
		ASSERT_EQ(shoal_engine_kv_ring(er), WINDOW + ROWS);
		ASSERT_EQ(shoal_engine_kv_ring(ef), 0);
		uint32_t sr, sf;
		ASSERT_EQ(shoal_engine_session_open(er, &sr), SHOAL_OK);
		ASSERT_EQ(shoal_engine_session_open(ef, &sf), SHOAL_OK);
		uint32_t p = 0, step = 0, rows = 0, rewound = 0, wrapped = 0;
		const uint32_t chunks[] = {5, 8, 3};
		while (p < 200) {
			uint32_t n, keep, salt = step;
			if (step < 3) {
				n = chunks[step], keep = n;
			} else if (p < 150) {
				n = 2 + step % 7;          /* the fed id and 1..7 drafts */
				keep = 1 + (step * 5) % n; /* 1..n of them kept */
			} else {
				n = 1, keep = 1;
			}
			ASSERT_EQ(run_rows(er, sr, p, n, salt, a), SHOAL_OK);
			ASSERT_EQ(run_rows(ef, sf, p, n, salt, b), SHOAL_OK);
			ASSERT_MEM_EQ(a, b, (size_t)n * VOCAB * sizeof *a);
			wrapped += (p + n - 1) % (WINDOW + ROWS) < WINDOW - 1;
			rewound += n - keep;
			rows += n;
			p += keep;
			step++;
		}
		printf("%s, %s cache: %u rows, %u rewound, %u windows wrapped the ring: bitwise\n",
		       name, kvs[k] == SHOAL_DTYPE_F16 ? "F16" : "F32", rows, rewound, wrapped);
		ASSERT_GT(rewound, 50);
		ASSERT_GT(wrapped, 10);
		shoal_engine_free(er);
		shoal_engine_free(ef);
	}
	free(a);
	free(b);
	shoal_model_free(m);
}

/* A rewind past the ring: reusable says 0 and the engine refuses the batch;
 * a rewind within it (here max_rows positions back) is taken, and from 0 the
 * session computes the bits of a fresh one. With whole planes any rewind is
 * exact. */
static void test_rewind(void)
{
	shoal_model *m = fixture();
	ASSERT_TRUE(m != NULL);
	shoal_engine *er = engine(m, SHOAL_DTYPE_F16, false),
	             *ef = engine(m, SHOAL_DTYPE_F16, true);
	ASSERT_TRUE(er && ef);
	float *a = malloc(ROWS * VOCAB * sizeof *a), *b = malloc(ROWS * VOCAB * sizeof *b);
	ASSERT_TRUE(a && b);
	uint32_t sr, sf;
	ASSERT_EQ(shoal_engine_session_open(er, &sr), SHOAL_OK);
	ASSERT_EQ(shoal_engine_session_open(ef, &sf), SHOAL_OK);
	for (uint32_t p = 0; p < 100; p += ROWS) {
		ASSERT_EQ(run_rows(er, sr, p, ROWS, 0, a), SHOAL_OK);
		ASSERT_EQ(run_rows(ef, sf, p, ROWS, 0, b), SHOAL_OK);
	}
	/* 104 positions; the rings (16) hold 88.. */
	ASSERT_EQ(shoal_engine_session_len(er, sr), 104);
	ASSERT_EQ(shoal_engine_session_kept_from(er, sr), 104 - (WINDOW + ROWS));
	ASSERT_EQ(shoal_engine_session_reusable(er, sr, 40), 0);
	ASSERT_EQ(shoal_engine_session_reusable(er, sr, 94), 0);  /* window from 87 */
	ASSERT_EQ(shoal_engine_session_reusable(er, sr, 95), 95); /* from 88 */
	ASSERT_EQ(shoal_engine_session_reusable(er, sr, 104 - ROWS), 104 - ROWS);
	ASSERT_EQ(shoal_engine_session_reusable(er, sr, 500), 104);
	ASSERT_EQ(shoal_engine_session_reusable(ef, sf, 40), 40);
	ASSERT_EQ(shoal_engine_session_kept_from(ef, sf), 0);
	/* too far: refused, the session untouched */
	ASSERT_EQ(run_rows(er, sr, 40, 4, 9, a), SHOAL_ERR_RANGE);
	ASSERT_EQ(shoal_engine_session_len(er, sr), 104);
	/* near: the same bits as whole planes rewound alike */
	ASSERT_EQ(run_rows(er, sr, 96, 4, 9, a), SHOAL_OK);
	ASSERT_EQ(run_rows(ef, sf, 96, 4, 9, b), SHOAL_OK);
	ASSERT_MEM_EQ(a, b, 4 * VOCAB * sizeof *a);
	/* and then too far: recompute from 0 instead, then on to 60 */
	ASSERT_EQ(run_rows(ef, sf, 40, 4, 9, b), SHOAL_OK); /* whole planes: exact */
	for (uint32_t p = 0; p < 40; p += ROWS)
		ASSERT_EQ(run_rows(er, sr, p, ROWS, 0, a), SHOAL_OK);
	ASSERT_EQ(run_rows(er, sr, 40, 4, 9, a), SHOAL_OK);
	ASSERT_MEM_EQ(a, b, 4 * VOCAB * sizeof *a);
	free(a);
	free(b);
	shoal_engine_free(er);
	shoal_engine_free(ef);
	shoal_model_free(m);
}

/* The cache's bytes: 2 full layers x n_ctx + 2 sliding layers x ring, per
 * session; whole planes: 4 x n_ctx. A stage owning layers [2, 4) counts its
 * own: 1 of each. */
static void test_bytes(void)
{
	shoal_model *m = fixture();
	ASSERT_TRUE(m != NULL);
	const uint64_t sess = 2, elt = 2, row = KVROW * elt;
	shoal_engine *er = engine(m, SHOAL_DTYPE_F16, false),
	             *ef = engine(m, SHOAL_DTYPE_F16, true);
	ASSERT_TRUE(er && ef);
	uint64_t ring = sess * row * (2 * CTX + 2 * (WINDOW + ROWS));
	uint64_t full = sess * row * 4 * CTX;
	printf("KV of %d layers x %d positions x %d sessions: %llu bytes with rings, %llu with "
	       "whole planes\n",
	       LAYERS, CTX, (int)sess, (unsigned long long)shoal_engine_kv_bytes(er),
	       (unsigned long long)shoal_engine_kv_bytes(ef));
	ASSERT_U64_EQ(shoal_engine_kv_bytes(er), ring);
	ASSERT_U64_EQ(shoal_engine_kv_bytes(ef), full);
	/* what one session of n positions holds (the prefix cache's count):
	 * n of each full layer, at most the ring of each sliding one */
	const uint32_t R = WINDOW + ROWS;
	ASSERT_U64_EQ(shoal_engine_kv_bytes_held(er, 5), row * 4 * 5);
	ASSERT_U64_EQ(shoal_engine_kv_bytes_held(er, R), row * 4 * R);
	ASSERT_U64_EQ(shoal_engine_kv_bytes_held(er, 100), row * (2 * 100 + 2 * R));
	ASSERT_U64_EQ(shoal_engine_kv_bytes_held(ef, 100), row * 4 * 100);
	ASSERT_U64_EQ(shoal_engine_kv_bytes_held(er, CTX), ring / sess);
	shoal_engine_free(er);
	shoal_engine_free(ef);

	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = shoal_backend_cpu();
	cfg.n_ctx = CTX;
	cfg.max_rows = ROWS;
	cfg.layer_begin = 2;
	cfg.layer_end = 4;
	cfg.has_embd = false;
	shoal_engine *es = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_engine_new(m, &cfg, &es, why, sizeof why), SHOAL_OK);
	ASSERT_U64_EQ(shoal_engine_kv_bytes(es), row * (CTX + WINDOW + ROWS));
	shoal_engine_free(es);
	/* a window whose ring would not be smaller than the context: whole */
	cfg.n_ctx = WINDOW + ROWS;
	ASSERT_EQ(shoal_engine_new(m, &cfg, &es, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_engine_kv_ring(es), 0);
	ASSERT_U64_EQ(shoal_engine_kv_bytes(es), row * 2 * (WINDOW + ROWS));
	shoal_engine_free(es);
	/* the scheduler's manifest: a sliding layer holds window + a serving
	 * engine's rows (SHOAL_MANIFEST_KV_RING_ROWS), a full one the context */
	shoal_manifest mf;
	ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
	for (uint32_t l = 0; l < LAYERS; l++) {
		ASSERT_U64_EQ(mf.layers[l].kv_bytes_per_token, KVROW * SHOAL_MANIFEST_KV_ELT);
		ASSERT_EQ(mf.layers[l].kv_positions,
		          l % 2 ? 0 : WINDOW + SHOAL_MANIFEST_KV_RING_ROWS);
		ASSERT_U64_EQ(shoal_manifest_kv_ctx(&mf.layers[l], 4096),
		              l % 2 ? 4096 : WINDOW + SHOAL_MANIFEST_KV_RING_ROWS);
	}
	shoal_manifest_fini(&mf);
	shoal_model_free(m);
	unlink(path);
}

TEST_MAIN(TEST_CASE(test_bitwise), TEST_CASE(test_rewind), TEST_CASE(test_bytes))
