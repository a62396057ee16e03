/*
 * tests/unit/test_sched_stability.c: heterogeneity and stability.
 *   - a slow peer added to a fast pair is used only when memory needs it;
 *     a model that fits one peer runs on one peer;
 *   - removing a peer that holds nothing leaves the plan (digest, epoch)
 *     unchanged;
 *   - a new peer changes the plan only when the predicted gain passes the
 *     threshold;
 *   - among near-equal plans the one that moves the fewest bytes wins.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#define GB 1000000000ULL

static shoal_manifest_layer layers[32];

/* L dense layers of 1 GB each, a 1 MB embedding and head, no KV. */
static shoal_manifest dense_model(uint32_t L)
{
	shoal_manifest m;
	memset(&m, 0, sizeof m);
	memset(layers, 0, sizeof layers);
	snprintf(m.name, sizeof m.name, "dense-%u", L);
	m.n_layer = L;
	m.layers = layers;
	for (uint32_t l = 0; l < L; l++) {
		layers[l].bytes = GB;
		layers[l].flops = 2 * GB;
	}
	m.embd_bytes = 1000000;
	m.head_bytes = 1000000;
	m.head_flops = 2000000;
	m.act_bytes_per_token = 16384;
	return m;
}

static shoal_view_peer peer(uint8_t id, const char *name, uint64_t mem, uint64_t bw_gbs)
{
	shoal_view_peer p;
	memset(&p, 0, sizeof p);
	p.id.b[15] = id;
	snprintf(p.name, sizeof p.name, "%s", name);
	p.mem_bytes = mem;
	p.mem_bw = bw_gbs * GB;
	p.flops = 100000 * GB; /* compute never binds here */
	return p;
}

static shoal_view *view_of(const shoal_view_peer *ps, int n)
{
	/* 20 us, 40 Gbit/s between every pair */
	shoal_view *v = shoal_view_new(20000, 5 * GB);
	for (int i = 0; i < n; i++)
		shoal_view_add_peer(v, &ps[i], NULL, 0);
	return v;
}

static shoal_policy policy(void)
{
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.ctx = 0;
	pol.headroom_permille = 0;
	return pol;
}

static bool uses(const shoal_plan *p, const char *name)
{
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!strcmp(shoal_plan_peer_at(p, i)->name, name))
			return true;
	return false;
}

static void test_slow_peer_only_when_memory_needs_it(void)
{
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	shoal_plan *p = NULL;
	/* A and B (800 GB/s) hold 12 GB each: 20 GB of layers need both */
	shoal_view_peer ps[3] = {peer(1, "fast-a", 12 * GB, 800), peer(2, "fast-b", 12 * GB, 800),
	                         peer(3, "slow", 64 * GB, 50)};
	shoal_view *v = view_of(ps, 3);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(p), 2);
	ASSERT_FALSE(uses(p, "slow"));
	shoal_plan_free(p);
	shoal_view_free(v);
	/* at 9 GB each the pair is 2 GB short: the slow peer takes the rest,
	 * and no more than the rest */
	ps[0].mem_bytes = ps[1].mem_bytes = 9 * GB + 10000000; /* 9 layers + embd/head */
	v = view_of(ps, 3);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(uses(p, "slow"));
	ASSERT_EQ(shoal_plan_n_stages(p), 3);
	for (size_t i = 0; i < 3; i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		if (!strcmp(shoal_plan_peer_at(p, s->peer)->name, "slow"))
			ASSERT_EQ(s->end_layer - s->first_layer, 2);
	}
	shoal_plan_free(p);
	shoal_view_free(v);
	/* a model that fits one peer runs on one peer */
	ps[0].mem_bytes = 64 * GB;
	v = view_of(ps, 3);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(p), 1);
	ASSERT_EQ(shoal_plan_n_peers(p), 1);
	ASSERT_TRUE(uses(p, "fast-a"));
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_busy_peer_counts_slower(void)
{
	/* two equal peers; the one busy at 50 % (load bucket) is avoided */
	shoal_manifest m = dense_model(8);
	shoal_policy pol = policy();
	shoal_view_peer ps[2] = {peer(1, "busy", 64 * GB, 800), peer(2, "idle", 64 * GB, 800)};
	ps[0].load_pct = 50;
	shoal_view *v = view_of(ps, 2);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_peers(p), 1);
	ASSERT_TRUE(uses(p, "idle"));
	uint64_t t_idle = shoal_plan_predicted_ns(p);
	shoal_plan_free(p);
	shoal_view_free(v);
	ps[1].load_pct = 50; /* both busy: twice the time */
	v = view_of(ps, 2);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_NEAR((double)shoal_plan_predicted_ns(p) / (double)t_idle, 2.0, 0.01);
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_removing_idle_peer_keeps_plan(void)
{
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	shoal_view_peer ps[3] = {peer(1, "a", 12 * GB, 800), peer(2, "b", 12 * GB, 800),
	                         peer(3, "idle", 64 * GB, 50)};
	shoal_view *v = view_of(ps, 3);
	shoal_plan *p0 = NULL, *p1 = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p0, NULL, 0), SHOAL_OK);
	ASSERT_FALSE(uses(p0, "idle"));
	ASSERT_EQ(shoal_view_remove_peer(v, &ps[2].id), SHOAL_OK);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &p1, NULL, 0), SHOAL_OK);
	ASSERT_MEM_EQ(shoal_plan_digest(p1), shoal_plan_digest(p0), SHOAL_DIGEST_BYTES);
	ASSERT_U64_EQ(shoal_plan_epoch(p1), shoal_plan_epoch(p0));
	ASSERT_U64_EQ(shoal_plan_moved_bytes(p1), 0);
	shoal_plan_free(p1);
	/* removing a peer that holds layers does change it */
	ASSERT_EQ(shoal_view_remove_peer(v, &ps[1].id), SHOAL_OK);
	shoal_view_peer big = peer(4, "big", 64 * GB, 800);
	shoal_view_add_peer(v, &big, NULL, 0);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &p1, NULL, 0), SHOAL_OK);
	ASSERT_FALSE(shoal_plan_kept(p1));
	ASSERT_U64_EQ(shoal_plan_epoch(p1), shoal_plan_epoch(p0) + 1);
	shoal_plan_free(p1);
	shoal_plan_free(p0);
	shoal_view_free(v);
}

static void test_new_peer_needs_gain_threshold(void)
{
	shoal_manifest m = dense_model(10);
	shoal_policy pol = policy(); /* gain threshold 10 % */
	shoal_view_peer ps[3] = {peer(1, "old", 64 * GB, 400), peer(2, "bit-faster", 64 * GB, 420),
	                         peer(3, "much-faster", 64 * GB, 800)};
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p0 = NULL, *p1 = NULL, *fresh = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p0, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(uses(p0, "old"));
	/* 5 % faster: a fresh plan would take it, the previous one is kept */
	shoal_view_add_peer(v, &ps[1], NULL, 0);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &fresh, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(uses(fresh, "bit-faster"));
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &p1, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_kept(p1));
	ASSERT_MEM_EQ(shoal_plan_digest(p1), shoal_plan_digest(p0), SHOAL_DIGEST_BYTES);
	shoal_plan_free(p1);
	/* a lower threshold lets the same gain through */
	pol.gain_permille = 30;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &p1, NULL, 0), SHOAL_OK);
	ASSERT_FALSE(shoal_plan_kept(p1));
	ASSERT_TRUE(uses(p1, "bit-faster"));
	shoal_plan_free(p1);
	pol.gain_permille = 100;
	/* twice as fast: adopted, epoch + 1 */
	shoal_view_add_peer(v, &ps[2], NULL, 0);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p0, &p1, NULL, 0), SHOAL_OK);
	ASSERT_FALSE(shoal_plan_kept(p1));
	ASSERT_TRUE(uses(p1, "much-faster"));
	ASSERT_FALSE(uses(p1, "old"));
	ASSERT_U64_EQ(shoal_plan_epoch(p1), shoal_plan_epoch(p0) + 1);
	ASSERT_LT(shoal_plan_predicted_ns(p1) * 10, shoal_plan_predicted_ns(p0) * 6);
	shoal_plan_free(p1);
	shoal_plan_free(fresh);
	shoal_plan_free(p0);
	shoal_view_free(v);
}

static void test_fewest_bytes_moved_among_near_equal(void)
{
	shoal_manifest m = dense_model(12);
	shoal_policy pol = policy();
	/* 6.5 GB each: the only split is 6 + 6 */
	shoal_view_peer ps[3] = {peer(1, "x", 6500000000ULL, 100), peer(2, "y", 6500000000ULL, 100),
	                         peer(3, "c", 8500000000ULL, 101)};
	shoal_view *v = view_of(ps, 2);
	shoal_plan *prev = NULL, *fresh = NULL, *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &prev, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(prev), 2);
	const char *first = shoal_plan_peer_at(prev, shoal_plan_stage_at(prev, 0)->peer)->name;
	int keep = first[0] == 'x' ? 0 : 1, gone = 1 - keep;
	shoal_view_free(v);
	/* the second peer leaves; c (1 % faster, room for 8 layers) joins and
	 * the first peer may now hold 8 layers too */
	shoal_view_peer now[2] = {ps[keep], ps[2]};
	now[0].mem_bytes = 8500000000ULL;
	(void)gone;
	v = view_of(now, 2);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &fresh, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, prev, &p, NULL, 0), SHOAL_OK);
	/* the fastest plan puts 8 layers on c; the chosen one keeps the old
	 * peer's 6 layers where they are and loads only 6 on c */
	ASSERT_EQ(shoal_plan_n_stages(fresh), 2);
	ASSERT_EQ(shoal_plan_n_stages(p), 2);
	const shoal_plan_stage *s0 = shoal_plan_stage_at(p, 0);
	ASSERT_STR_EQ(shoal_plan_peer_at(p, s0->peer)->name, ps[keep].name);
	ASSERT_EQ(s0->end_layer, 6);
	ASSERT_U64_EQ(shoal_plan_moved_bytes(p), 6 * GB + m.head_bytes);
	ASSERT_GT(shoal_plan_predicted_ns(p), shoal_plan_predicted_ns(fresh));
	ASSERT_LE(shoal_plan_predicted_ns(p) * 1000, shoal_plan_predicted_ns(fresh) * 1020);
	for (size_t i = 0; i < 2; i++) { /* the fastest plan: 8 layers on c */
		const shoal_plan_stage *s = shoal_plan_stage_at(fresh, i);
		if (!strcmp(shoal_plan_peer_at(fresh, s->peer)->name, "c"))
			ASSERT_EQ(s->end_layer - s->first_layer, 8);
	}
	/* with no margin for near-equal plans, the fastest one is taken */
	shoal_plan_free(p);
	pol.near_permille = 0;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, prev, &p, NULL, 0), SHOAL_OK);
	ASSERT_U64_EQ(shoal_plan_predicted_ns(p), shoal_plan_predicted_ns(fresh));
	shoal_plan_free(p);
	shoal_plan_free(fresh);
	shoal_plan_free(prev);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_slow_peer_only_when_memory_needs_it),
          TEST_CASE(test_busy_peer_counts_slower), TEST_CASE(test_removing_idle_peer_keeps_plan),
          TEST_CASE(test_new_peer_needs_gain_threshold),
          TEST_CASE(test_fewest_bytes_moved_among_near_equal))
