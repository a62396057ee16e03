/*
 * tests/unit/test_dist_prefix.c: the prefix cache's keys, pool and control
 * words (runtime/dist/dist_prefix.c, dist_proto.c; issue 37): a chain hash
 * names every token before a block's end; the same tokens under another
 * model id, layer range, device split, backend or KV type never match; the
 * pool matches the longest run of leading blocks, stops at the first
 * block that differs, evicts the least recently used first and keeps to
 * its byte bound; OPEN, CLOSE and MATCH carry their hashes through the
 * codec (OPEN with its floor for sliding layers' rings), and bad counts
 * are refused.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/grammar.h"
#include "runtime/dist/dist_impl.h"
#include "tests/unit/test.h"

#define HASH SHOAL_DIST_PREFIX_HASH
#define BLK  SHOAL_DIST_PREFIX_BLOCK

static void ids_fill(int32_t *ids, uint32_t n, int32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		ids[i] = base + (int32_t)(i * 7u % 301u);
}

/* keys of the whole blocks of ids[n_blocks * BLK] under salt */
static void keys_of(const uint8_t salt[HASH], const int32_t *ids, uint32_t n_blocks, uint8_t *keys)
{
	uint8_t *chain = malloc((size_t)n_blocks * HASH);
	ASSERT_TRUE(chain != NULL);
	dist__prefix_chain_all(ids, n_blocks, chain);
	for (uint32_t b = 0; b < n_blocks; b++)
		dist__prefix_key(salt, chain + (size_t)b * HASH, keys + (size_t)b * HASH);
	free(chain);
}

static void test_chain(void)
{
	int32_t a[4 * BLK], b[4 * BLK];
	ids_fill(a, 4 * BLK, 100);
	memcpy(b, a, sizeof a);
	b[BLK + 3] ^= 1; /* block 1 differs */
	uint8_t ha[4 * HASH], hb[4 * HASH];
	dist__prefix_chain_all(a, 4, ha);
	dist__prefix_chain_all(b, 4, hb);
	ASSERT_MEM_EQ(ha, hb, HASH);     /* block 0 is the same */
	for (uint32_t i = 1; i < 4; i++) /* every block after the change */
		ASSERT_TRUE(memcmp(ha + i * HASH, hb + i * HASH, HASH)); /* differs */
	/* a block's hash depends on what came before it, not only its tokens */
	int32_t c[2 * BLK];
	memcpy(c, a + BLK, BLK * sizeof *c);
	memcpy(c + BLK, a + BLK, BLK * sizeof *c);
	uint8_t hc[2 * HASH];
	dist__prefix_chain_all(c, 2, hc);
	ASSERT_TRUE(memcmp(hc, hc + HASH, HASH));
	/* deterministic */
	uint8_t again[4 * HASH];
	dist__prefix_chain_all(a, 4, again);
	ASSERT_MEM_EQ(ha, again, sizeof ha);
}

/* The hostile mix: the same tokens keyed by stages that differ in one of
 * what the KV depends on never match each other's entries. */
static void test_salt_never_mixes(void)
{
	uint8_t id[SHOAL_MODEL_ID_BYTES], id2[SHOAL_MODEL_ID_BYTES];
	memset(id, 0x11, sizeof id);
	memcpy(id2, id, sizeof id);
	id2[SHOAL_MODEL_ID_BYTES - 1] ^= 1;
	uint8_t s[7][HASH];
	dist__prefix_salt(id, 0, 4, 4, "cpu", SHOAL_DTYPE_F16, s[0]);
	dist__prefix_salt(id2, 0, 4, 4, "cpu", SHOAL_DTYPE_F16, s[1]); /* another model */
	dist__prefix_salt(id, 0, 3, 3, "cpu", SHOAL_DTYPE_F16, s[2]);  /* another range */
	dist__prefix_salt(id, 1, 4, 4, "cpu", SHOAL_DTYPE_F16, s[3]);
	dist__prefix_salt(id, 0, 4, 4, "cpu", SHOAL_DTYPE_F32, s[4]);    /* another KV type */
	dist__prefix_salt(id, 0, 4, 4, "vulkan", SHOAL_DTYPE_F16, s[5]); /* another backend */
	dist__prefix_salt(id, 0, 4, 2, "cpu", SHOAL_DTYPE_F16, s[6]);    /* another split */
	uint8_t same[HASH];
	dist__prefix_salt(id, 0, 4, 4, "cpu", SHOAL_DTYPE_F16, same);
	ASSERT_MEM_EQ(same, s[0], HASH);
	int32_t ids[3 * BLK];
	ids_fill(ids, 3 * BLK, 5);
	uint8_t keys[7][3 * HASH];
	for (int i = 0; i < 7; i++)
		keys_of(s[i], ids, 3, keys[i]);
	/* stage 0's pool holds the prompt; every other stage's keys miss it */
	dist__pcache c;
	ASSERT_EQ(dist__pcache_init(&c, 4, UINT64_MAX), SHOAL_OK);
	uint32_t freed[4], n_freed;
	ASSERT_TRUE(dist__pcache_put(&c, 0, keys[0], 3, 3 * BLK * 64, freed, &n_freed));
	uint32_t m;
	ASSERT_EQ(dist__pcache_match(&c, keys[0], 3, &m), 0);
	ASSERT_EQ(m, 3);
	for (int i = 1; i < 7; i++) {
		ASSERT_EQ(dist__pcache_match(&c, keys[i], 3, &m), -1);
		ASSERT_EQ(m, 0);
	}
	dist__pcache_fini(&c);
}

static void test_pool_match(void)
{
	uint8_t salt[HASH] = {1, 2, 3};
	int32_t a[6 * BLK], b[6 * BLK];
	ids_fill(a, 6 * BLK, 1000);
	memcpy(b, a, sizeof a);
	b[2 * BLK + 5] = 7; /* diverges in the middle of block 2 */
	uint8_t ka[6 * HASH], kb[6 * HASH];
	keys_of(salt, a, 6, ka);
	keys_of(salt, b, 6, kb);
	dist__pcache c;
	ASSERT_EQ(dist__pcache_init(&c, 3, UINT64_MAX), SHOAL_OK);
	uint32_t freed[3], n_freed, m;
	ASSERT_EQ(dist__pcache_match(&c, ka, 6, &m), -1); /* empty */
	ASSERT_TRUE(
	    dist__pcache_put(&c, 2, ka, 4, 4 * BLK * 64, freed, &n_freed)); /* 4 blocks of a */
	ASSERT_EQ(n_freed, 0);
	/* b: only the 2 whole blocks before its divergence */
	int i = dist__pcache_match(&c, kb, 6, &m);
	ASSERT_GE(i, 0);
	ASSERT_EQ(m, 2);
	/* a longer request matches what the entry holds, a shorter one itself */
	ASSERT_EQ(dist__pcache_match(&c, ka, 6, &m), i);
	ASSERT_EQ(m, 4);
	ASSERT_EQ(dist__pcache_match(&c, ka, 1, &m), i);
	ASSERT_EQ(m, 1);
	/* a longer entry wins over a shorter one */
	ASSERT_TRUE(dist__pcache_put(&c, 0, ka, 6, 6 * BLK * 64, freed, &n_freed));
	int j = dist__pcache_match(&c, ka, 6, &m);
	ASSERT_EQ(m, 6);
	ASSERT_EQ(dist__pcache_take(&c, j), 0u); /* its slot, taken out */
	ASSERT_EQ(dist__pcache_match(&c, ka, 6, &m), i);
	ASSERT_EQ(m, 4);
	uint64_t ne, nt, nb;
	dist__pcache_size(&c, &ne, &nt, &nb);
	ASSERT_U64_EQ(ne, 1);
	ASSERT_U64_EQ(nt, 4 * BLK);
	ASSERT_U64_EQ(nb, 4 * BLK * 64);
	dist__pcache_fini(&c);
	/* off: keeps nothing, matches nothing */
	ASSERT_EQ(dist__pcache_init(&c, 3, 0), SHOAL_OK);
	ASSERT_FALSE(dist__pcache_put(&c, 1, ka, 2, 2 * BLK * 64, freed, &n_freed));
	ASSERT_EQ(dist__pcache_match(&c, ka, 2, &m), -1);
	ASSERT_EQ(dist__pcache_evict(&c), -1);
	dist__pcache_fini(&c);
}

static void test_pool_evicts(void)
{
	uint8_t salt[HASH] = {9};
	int32_t ids[4][2 * BLK];
	uint8_t k[4][2 * HASH];
	for (int i = 0; i < 4; i++) {
		ids_fill(ids[i], 2 * BLK, 50 * i);
		keys_of(salt, ids[i], 2, k[i]);
	}
	/* room for 4 blocks of 10 bytes a token: two entries of 2 blocks */
	dist__pcache c;
	ASSERT_EQ(dist__pcache_init(&c, 4, 4 * BLK * 10), SHOAL_OK);
	uint32_t freed[4], n_freed, m;
	ASSERT_TRUE(dist__pcache_put(&c, 10, k[0], 2, 2 * BLK * 10, freed, &n_freed));
	ASSERT_TRUE(dist__pcache_put(&c, 11, k[1], 2, 2 * BLK * 10, freed, &n_freed));
	ASSERT_EQ(n_freed, 0);
	/* the third is over the bound: the least recently used (slot 10) goes */
	ASSERT_TRUE(dist__pcache_put(&c, 12, k[2], 2, 2 * BLK * 10, freed, &n_freed));
	ASSERT_EQ(n_freed, 1);
	ASSERT_EQ(freed[0], 10u);
	ASSERT_U64_EQ(c.evictions, 1);
	ASSERT_EQ(dist__pcache_match(&c, k[0], 2, &m), -1);
	ASSERT_GE(dist__pcache_match(&c, k[1], 2, &m), 0);
	/* one entry larger than the whole bound is not kept */
	int32_t big[5 * BLK];
	uint8_t kbig[5 * HASH];
	ids_fill(big, 5 * BLK, 3);
	keys_of(salt, big, 5, kbig);
	ASSERT_FALSE(dist__pcache_put(&c, 13, kbig, 5, 5 * BLK * 10, freed, &n_freed));
	/* evict takes the oldest: slot 11, then 12, then nothing */
	ASSERT_EQ(dist__pcache_evict(&c), 11);
	ASSERT_EQ(dist__pcache_evict(&c), 12);
	ASSERT_EQ(dist__pcache_evict(&c), -1);
	dist__pcache_fini(&c);
	/* an entry counts the bytes its slot holds, not its blocks times a
	 * token's bytes (a sliding layer's ring holds fewer): two entries of
	 * 5 blocks holding 2 blocks' bytes each fit a bound of 4 blocks */
	ASSERT_EQ(dist__pcache_init(&c, 4, 4 * BLK * 10), SHOAL_OK);
	ASSERT_TRUE(dist__pcache_put(&c, 20, kbig, 5, 2 * BLK * 10, freed, &n_freed));
	ASSERT_TRUE(dist__pcache_put(&c, 21, k[3], 2, 2 * BLK * 10, freed, &n_freed));
	ASSERT_EQ(n_freed, 0);
	uint64_t ne, nt, nb;
	dist__pcache_size(&c, &ne, &nt, &nb);
	ASSERT_U64_EQ(ne, 2);
	ASSERT_U64_EQ(nt, 7 * BLK);
	ASSERT_U64_EQ(nb, 4 * BLK * 10);
	ASSERT_TRUE(dist__pcache_put(&c, 22, k[0], 2, 1, freed, &n_freed)); /* one byte over */
	ASSERT_EQ(n_freed, 1);
	ASSERT_EQ(freed[0], 20u);
	dist__pcache_fini(&c);
	/* no free entry (every slot kept): put refuses, the caller frees */
	ASSERT_EQ(dist__pcache_init(&c, 1, UINT64_MAX), SHOAL_OK);
	ASSERT_TRUE(dist__pcache_put(&c, 0, k[0], 2, 2 * BLK * 10, freed, &n_freed));
	ASSERT_FALSE(dist__pcache_put(&c, 1, k[1], 2, 2 * BLK * 10, freed, &n_freed));
	dist__pcache_fini(&c);
}

/* encode c, decode it back through a frame */
static shoal_err roundtrip(const dist__ctl *c, int32_t *words, dist__ctl *out, char *why)
{
	uint32_t dim = dist__ctl_encode(c, words, SHOAL_DIST_CTL_MAX_WORDS);
	if (!dim)
		return SHOAL_ERR_RANGE;
	shoal_xfer_row row = {.session = 1};
	shoal_xfer_frame f = {.hdr = {.kind = SHOAL_XFER_KIND_SESSION,
	                              .dtype = SHOAL_XFER_DTYPE_I32,
	                              .dim = dim,
	                              .n_rows = 1,
	                              .rows = &row,
	                              .payload_len = dim * 4u},
	                      .payload = (const uint8_t *)words};
	return dist__ctl_decode(&f, out, why, SHOAL_WHY_LEN);
}

static void test_codec(void)
{
	static int32_t words[SHOAL_DIST_CTL_MAX_WORDS];
	char why[SHOAL_WHY_LEN];
	int32_t prompt[3 * BLK + 1], tail[4] = {5, 6, 7, 8};
	ids_fill(prompt, 3 * BLK + 1, 2);
	uint8_t h[3 * HASH];
	dist__prefix_chain_all(prompt, 3, h);
	dist__ctl c = {.op = SHOAL_DIST_CTL_OPEN,
	               .n_prompt = 3 * BLK + 1,
	               .max_tokens = 4,
	               .logprobs = 2,
	               .want_match = true,
	               .n_tail = 4,
	               .tail = tail,
	               .n_hash = 3,
	               .pfloor = 2,
	               .hash = h};
	c.sp.temp = 0.5f;
	c.sp.repeat_penalty = 1.0f;
	c.sp.n_bias = 1;
	c.sp.bias_id[0] = 42;
	c.sp.bias[0] = 1.5f;
	dist__ctl d;
	ASSERT_EQ(roundtrip(&c, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.n_hash, 3);
	ASSERT_EQ(d.pfloor, 2);
	ASSERT_MEM_EQ(d.hash, h, sizeof h);
	ASSERT_TRUE(d.want_match);
	/* a floor past any count: refused */
	c.pfloor = SHOAL_DIST_PREFIX_MAX_BLOCKS + 1;
	ASSERT_EQ(roundtrip(&c, words, &d, why), SHOAL_ERR_FORMAT);
	c.pfloor = 2;
	ASSERT_EQ(roundtrip(&c, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.logprobs, 2);
	ASSERT_EQ(d.n_tail, 4);
	ASSERT_MEM_EQ(d.tail, tail, sizeof tail);
	ASSERT_EQ(d.sp.bias_id[0], 42);
	ASSERT_EQ(d.status, 0);
	/* hashes that reach the last prompt position: refused */
	c.n_prompt = 3 * BLK;
	ASSERT_EQ(roundtrip(&c, words, &d, why), SHOAL_ERR_FORMAT);
	c.n_prompt = 3 * BLK + 1;
	/* a count over the cap, or one the words do not hold: refused */
	uint32_t dim = dist__ctl_encode(&c, words, SHOAL_DIST_CTL_MAX_WORDS);
	words[1] = SHOAL_DIST_PREFIX_MAX_BLOCKS + 1;
	shoal_xfer_row row = {.session = 1};
	shoal_xfer_frame f = {.hdr = {.kind = SHOAL_XFER_KIND_SESSION,
	                              .dtype = SHOAL_XFER_DTYPE_I32,
	                              .dim = dim,
	                              .n_rows = 1,
	                              .rows = &row,
	                              .payload_len = dim * 4u},
	                      .payload = (const uint8_t *)words};
	ASSERT_EQ(dist__ctl_decode(&f, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	words[1] = 4; /* one block more than the words hold */
	ASSERT_EQ(dist__ctl_decode(&f, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	/* a constrained replay: grammar words and the ids generated, then the
	 * hashes (the two features share the OPEN; found merging them) */
	shoal_grammar_prog g = {0};
	ASSERT_EQ(shoal_grammar_json_object(&g, why, sizeof why), SHOAL_OK);
	int32_t done[2] = {11, 12};
	c.sp.grammar = g.w;
	c.sp.n_grammar = g.n;
	c.first_step = 2;
	c.n_done = 2;
	c.done = done;
	ASSERT_EQ(roundtrip(&c, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.sp.n_grammar, g.n);
	ASSERT_MEM_EQ(d.sp.grammar, g.w, g.n * 4u);
	ASSERT_EQ(d.n_done, 2);
	ASSERT_MEM_EQ(d.done, done, sizeof done);
	ASSERT_EQ(d.n_hash, 3);
	ASSERT_MEM_EQ(d.hash, h, sizeof h);
	ASSERT_MEM_EQ(d.tail, tail, sizeof tail);
	free(g.w);
	c.sp.grammar = NULL;
	c.sp.n_grammar = 0;
	c.first_step = 0;
	c.n_done = 0;
	c.done = NULL;
	/* CLOSE with hashes */
	dist__ctl cl = {.op = SHOAL_DIST_CTL_CLOSE, .n_hash = 2, .hash = h};
	ASSERT_EQ(roundtrip(&cl, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.op, SHOAL_DIST_CTL_CLOSE);
	ASSERT_EQ(d.n_hash, 2);
	ASSERT_MEM_EQ(d.hash, h, 2 * HASH);
	dist__ctl cl0 = {.op = SHOAL_DIST_CTL_CLOSE}; /* as before: no hashes */
	ASSERT_EQ(roundtrip(&cl0, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.n_hash, 0);
	/* MATCH: the count alone */
	dist__ctl mc = {.op = SHOAL_DIST_CTL_MATCH, .n_hash = 7};
	ASSERT_EQ(roundtrip(&mc, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.op, SHOAL_DIST_CTL_MATCH);
	ASSERT_EQ(d.n_hash, 7);
	/* ERROR keeps its status in word 1 */
	dist__ctl er = {.op = SHOAL_DIST_CTL_ERROR, .status = SHOAL_ERR_BUSY};
	snprintf(er.reason, sizeof er.reason, "busy");
	ASSERT_EQ(roundtrip(&er, words, &d, why), SHOAL_OK);
	ASSERT_EQ(d.status, SHOAL_ERR_BUSY);
	ASSERT_EQ(d.n_hash, 0);
}

TEST_MAIN(TEST_CASE(test_chain), TEST_CASE(test_salt_never_mixes), TEST_CASE(test_pool_match),
          TEST_CASE(test_pool_evicts), TEST_CASE(test_codec))
