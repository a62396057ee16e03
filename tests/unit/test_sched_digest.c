/*
 * tests/unit/test_sched_digest.c: the scheduler's own BLAKE2b-256 equals
 * libsodium's crypto_generichash; the buckets with hysteresis keep noise out
 * of the view; the readiness tracker says servable only when every peer of
 * the plan announced its digest; epochs never recur; a plan's encoding
 * decodes to the same plan, and hostile bytes are refused.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#include <sodium.h>

static void test_blake2b_matches_libsodium(void)
{
	ASSERT_TRUE(sodium_init() >= 0);
	ti_rng r = {99};
	uint8_t buf[1100];
	for (size_t len = 0; len <= sizeof buf; len += len < 300 ? 1 : 97) {
		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)ti_next(&r);
		uint8_t a[SHOAL_DIGEST_BYTES], b[SHOAL_DIGEST_BYTES];
		shoal_digest(buf, len, a);
		crypto_generichash(b, sizeof b, buf, len, NULL, 0);
		if (memcmp(a, b, SHOAL_DIGEST_BYTES))
			fprintf(stderr, "length %zu differs\n", len);
		ASSERT_MEM_EQ(a, b, 32);
	}
	char hex[65];
	uint8_t d[SHOAL_DIGEST_BYTES];
	shoal_digest("abc", 3, d);
	shoal_digest_hex(d, hex);
	ASSERT_EQ(strlen(hex), 64);
}

static void test_bucket_geo(void)
{
	/* bucket values grow by 2^(1/4) and the plain bucket is monotone */
	uint32_t prev_k = 0;
	for (uint64_t x = 64; x < (1ULL << 40);
	     x = x * 3 / 2 + 1) { /* below 64 the quarter-octave steps round to the same integer */
		uint32_t k = shoal_bucket_geo(x, SHOAL_BUCKET_NONE);
		ASSERT_GE(k, prev_k);
		ASSERT_LE(shoal_bucket_geo_value(k), x);
		ASSERT_GT(shoal_bucket_geo_value(k + 1), x);
		prev_k = k;
	}
	ASSERT_U64_EQ(shoal_bucket_geo_value(40), 1024); /* 2^10 */
	/* hysteresis: +-5 % noise around a value on a bucket edge never flips
	 * the bucket once it is set, while a 40 % change does */
	uint64_t edge = shoal_bucket_geo_value(120);
	uint32_t b = shoal_bucket_geo(edge, SHOAL_BUCKET_NONE);
	ti_rng r = {5};
	for (int i = 0; i < 1000; i++) {
		uint64_t noisy = edge / 100 * (95 + ti_range(&r, 0, 10));
		ASSERT_EQ(shoal_bucket_geo(noisy, b), b);
	}
	ASSERT_NE(shoal_bucket_geo(edge / 100 * 140, b), b);
	ASSERT_NE(shoal_bucket_geo(edge / 100 * 70, b), b);
	/* without history, the same noise does flip it */
	bool flipped = false;
	for (int i = 0; i < 100; i++)
		flipped |= shoal_bucket_geo(edge / 100 * (95 + ti_range(&r, 0, 10)),
		                            SHOAL_BUCKET_NONE) != b;
	ASSERT_TRUE(flipped);
}

static void test_bucket_load(void)
{
	ASSERT_EQ(shoal_bucket_load(37, SHOAL_BUCKET_NONE), 30);
	ASSERT_EQ(shoal_bucket_load(99, SHOAL_BUCKET_NONE), 90);
	ASSERT_EQ(shoal_bucket_load(41, 30), 30); /* within 5 points above */
	ASSERT_EQ(shoal_bucket_load(26, 30), 30); /* within 5 points below */
	ASSERT_EQ(shoal_bucket_load(46, 30), 40);
	ASSERT_EQ(shoal_bucket_load(22, 30), 20);
}

static shoal_plan *small_plan(ti_inst *t, shoal_view **vout)
{
	ti_rng r = {11};
	ti_random(t, &r, 3, 6, false);
	/* each peer holds a third: three stages */
	uint64_t total = t->m.embd_bytes + t->m.head_bytes;
	for (int l = 0; l < 6; l++)
		total += t->layers[l].bytes + t->layers[l].kv_bytes_per_token * 8192;
	for (int i = 0; i < 3; i++)
		t->p[i].mem_bytes = total / 2;
	shoal_policy pol;
	shoal_policy_init(&pol);
	*vout = ti_view(t, NULL);
	shoal_plan *p = NULL;
	shoal_schedule(*vout, &t->m, &pol, NULL, &p, NULL, 0);
	return p;
}

static void test_ready_tracker(void)
{
	ti_inst t;
	shoal_view *v;
	shoal_plan *p = small_plan(&t, &v);
	ASSERT_TRUE(p != NULL);
	ASSERT_GE(shoal_plan_n_peers(p), 2);
	shoal_ready *r = shoal_ready_new();
	const uint8_t *d = shoal_plan_digest(p);
	uint8_t other[SHOAL_DIGEST_BYTES];
	memcpy(other, d, SHOAL_DIGEST_BYTES);
	other[0] ^= 1;
	size_t np = shoal_plan_n_peers(p);
	ASSERT_FALSE(shoal_ready_servable(r, p));
	ASSERT_EQ(shoal_ready_missing(r, p, NULL, 0), np);
	/* all but the last announce D; the last announces another digest */
	for (size_t i = 0; i + 1 < np; i++)
		shoal_ready_announce(r, &shoal_plan_peer_at(p, i)->id, d);
	shoal_ready_announce(r, &shoal_plan_peer_at(p, np - 1)->id, other);
	ASSERT_FALSE(shoal_ready_servable(r, p));
	uint32_t miss[4];
	ASSERT_EQ(shoal_ready_missing(r, p, miss, 4), 1);
	ASSERT_EQ(miss[0], np - 1);
	/* a peer outside the plan announcing D changes nothing */
	shoal_peer_id stranger = {{0xff, 0xee}};
	shoal_ready_announce(r, &stranger, d);
	ASSERT_FALSE(shoal_ready_servable(r, p));
	/* the latest announcement wins */
	shoal_ready_announce(r, &shoal_plan_peer_at(p, np - 1)->id, d);
	ASSERT_TRUE(shoal_ready_servable(r, p));
	shoal_ready_announce(r, &shoal_plan_peer_at(p, 0)->id, other);
	ASSERT_FALSE(shoal_ready_servable(r, p));
	shoal_ready_announce(r, &shoal_plan_peer_at(p, 0)->id, d);
	ASSERT_TRUE(shoal_ready_servable(r, p));
	/* a peer that left is forgotten */
	shoal_ready_forget(r, &shoal_plan_peer_at(p, 0)->id);
	ASSERT_FALSE(shoal_ready_servable(r, p));
	shoal_ready_free(r);
	shoal_ready_free(NULL);
	shoal_plan_free(p);
	shoal_view_free(v);
}

/* Epochs never recur: a plan made from scratch (no previous plan: every
 * plan was lost) is numbered above the cluster's highest served epoch, so
 * the same assignment gets another (epoch, digest) than before. */
static void test_epoch_floor(void)
{
	ti_inst t;
	shoal_view *v;
	shoal_plan *p1 = small_plan(&t, &v);
	ASSERT_TRUE(p1 != NULL);
	ASSERT_EQ(shoal_plan_epoch(p1), 1);
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.epoch_floor = shoal_plan_epoch(p1);
	shoal_plan *p2 = NULL, *p3 = NULL;
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &p2, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_epoch(p2), 2);
	ASSERT_NE(memcmp(shoal_plan_digest(p1), shoal_plan_digest(p2), SHOAL_DIGEST_BYTES), 0);
	/* the same view, the previous plan given: it is kept, epoch and all */
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, p1, &p3, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_kept(p3));
	ASSERT_EQ(memcmp(shoal_plan_digest(p1), shoal_plan_digest(p3), SHOAL_DIGEST_BYTES), 0);
	shoal_plan_free(p1);
	shoal_plan_free(p2);
	shoal_plan_free(p3);
	shoal_view_free(v);
}

/* Decoding: every plan of random instances (dense and MoE, experts kept
 * and spread) decodes to one that encodes to the same bytes with the same
 * digest, and steers the scheduler as the original does (kept, same
 * digest); every truncation and every single-byte change either fails
 * with SHOAL_ERR_FORMAT or decodes to a plan that encodes to those bytes. */
static void test_plan_decode(void)
{
	ti_rng r = {2024};
	int plans = 0;
	for (int it = 0; it < 60; it++) {
		ti_inst t;
		ti_random(&t, &r, (int)ti_range(&r, 1, 6), (int)ti_range(&r, 1, 10),
		          ti_range(&r, 0, 1));
		shoal_view *v = ti_view(&t, NULL);
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.spread_experts = ti_range(&r, 0, 1);
		shoal_plan *p = NULL;
		if (shoal_schedule(v, &t.m, &pol, NULL, &p, NULL, 0) != SHOAL_OK) {
			shoal_view_free(v);
			continue;
		}
		plans++;
		uint8_t *enc, *enc2;
		size_t len, len2;
		ASSERT_EQ(shoal_plan_encode(p, &enc, &len), SHOAL_OK);
		shoal_plan *q = NULL;
		char why[SHOAL_WHY_LEN];
		ASSERT_EQ(shoal_plan_decode(enc, len, &q, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_plan_encode(q, &enc2, &len2), SHOAL_OK);
		ASSERT_EQ(len2, len);
		ASSERT_MEM_EQ(enc2, enc, len);
		ASSERT_MEM_EQ(shoal_plan_digest(q), shoal_plan_digest(p), 32);
		free(enc2);
		/* as a previous plan it is as good as the original */
		shoal_plan *k1 = NULL, *k2 = NULL;
		ASSERT_EQ(shoal_schedule(v, &t.m, &pol, p, &k1, NULL, 0), SHOAL_OK);
		ASSERT_EQ(shoal_schedule(v, &t.m, &pol, q, &k2, NULL, 0), SHOAL_OK);
		ASSERT_MEM_EQ(shoal_plan_digest(k1), shoal_plan_digest(k2), 32);
		ASSERT_TRUE(shoal_plan_kept(k2));
		shoal_plan_free(k1);
		shoal_plan_free(k2);
		shoal_plan_free(q);
		/* hostile bytes */
		for (size_t cut = 0; cut < len; cut++) {
			q = NULL;
			ASSERT_EQ(shoal_plan_decode(enc, cut, &q, why, sizeof why),
			          SHOAL_ERR_FORMAT);
			ASSERT_TRUE(q == NULL);
		}
		uint8_t *m = malloc(len + 1);
		for (int k = 0; k < 200; k++) {
			memcpy(m, enc, len);
			size_t at = (size_t)ti_range(&r, 0, len - 1);
			m[at] ^= (uint8_t)ti_range(&r, 1, 255);
			q = NULL;
			shoal_err e = shoal_plan_decode(m, len, &q, why, sizeof why);
			if (e == SHOAL_OK) {
				ASSERT_EQ(shoal_plan_encode(q, &enc2, &len2), SHOAL_OK);
				ASSERT_EQ(len2, len);
				ASSERT_MEM_EQ(enc2, m, len);
				free(enc2);
				shoal_plan_free(q);
			} else {
				ASSERT_EQ(e, SHOAL_ERR_FORMAT);
				ASSERT_TRUE(why[0] != '\0');
			}
		}
		memcpy(m, enc, len);
		m[len] = 0;
		ASSERT_EQ(shoal_plan_decode(m, len + 1, &q, why, sizeof why), SHOAL_ERR_FORMAT);
		free(m);
		free(enc);
		shoal_plan_free(p);
		shoal_view_free(v);
	}
	ASSERT_GE(plans, 20);
}

TEST_MAIN(TEST_CASE(test_blake2b_matches_libsodium), TEST_CASE(test_bucket_geo),
          TEST_CASE(test_bucket_load), TEST_CASE(test_ready_tracker), TEST_CASE(test_epoch_floor),
          TEST_CASE(test_plan_decode))
