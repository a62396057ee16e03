/*
 * tests/unit/test_sched_experts.c: MoE experts stay with their layer by default;
 * they spread when memory requires it, when the policy asks (balanced by
 * peer speed), and hot experts (by routing counts) get replicas when memory
 * allows.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#define GB 1000000000ULL
#define NE 8

static shoal_manifest_layer layers[4];

/* 4 layers: 0 dense, 1-3 MoE with NE experts of eb bytes, 2 used. */
static shoal_manifest moe_model(uint64_t eb)
{
	shoal_manifest m;
	memset(&m, 0, sizeof m);
	memset(layers, 0, sizeof layers);
	snprintf(m.name, sizeof m.name, "moe");
	m.n_layer = 4;
	m.layers = layers;
	for (int l = 0; l < 4; l++) {
		layers[l].bytes = GB / 10;
		layers[l].flops = GB / 5;
		if (l) {
			layers[l].n_expert = NE;
			layers[l].n_expert_used = 2;
			layers[l].expert_bytes = eb;
			layers[l].expert_flops = 2 * eb;
		}
	}
	m.embd_bytes = m.head_bytes = 1000000;
	m.head_flops = 2000000;
	m.act_bytes_per_token = 8192;
	return m;
}

static shoal_view *two_peers(uint64_t mem, uint64_t bw_a, uint64_t bw_b, uint64_t lat_ns)
{
	shoal_view *v = shoal_view_new(lat_ns, 10 * GB);
	shoal_view_peer p;
	memset(&p, 0, sizeof p);
	p.mem_bytes = mem;
	p.flops = 100000 * GB;
	p.id.b[15] = 1;
	p.mem_bw = bw_a * GB;
	snprintf(p.name, sizeof p.name, "a");
	shoal_view_add_peer(v, &p, NULL, 0);
	p.id.b[15] = 2;
	p.mem_bw = bw_b * GB;
	snprintf(p.name, sizeof p.name, "b");
	shoal_view_add_peer(v, &p, NULL, 0);
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

/* experts of layer l per plan peer; returns owners of the layer */
static int count_owners(const shoal_plan *p, uint32_t l, uint32_t cnt[8], int *replicated)
{
	memset(cnt, 0, 8 * sizeof *cnt);
	*replicated = 0;
	for (uint32_t e = 0; e < shoal_plan_layer_n_expert(p, l); e++) {
		uint32_t own[SHOAL_PLAN_MAX_OWNERS];
		size_t k = shoal_plan_expert_owners(p, l, e, own);
		*replicated += k > 1;
		for (size_t j = 0; j < k; j++)
			cnt[own[j]]++;
	}
	int n = 0;
	for (int i = 0; i < 8; i++)
		n += cnt[i] > 0;
	return n;
}

static void test_kept_by_default(void)
{
	/* slow links (2 ms): sending rows away never pays */
	shoal_manifest m = moe_model(GB / 10);
	shoal_policy pol = policy();
	shoal_view *v = two_peers(100 * GB, 400, 400, 2000000);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_peers(p), 1);
	uint32_t cnt[8];
	int rep;
	for (uint32_t l = 1; l < 4; l++) {
		ASSERT_EQ(count_owners(p, l, cnt, &rep), 1);
		ASSERT_EQ(rep, 0);
	}
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_spread_when_memory_requires(void)
{
	/* one layer's 8 experts (8 GB) exceed either peer (6 GB): a pipeline
	 * cannot hold it, spreading its experts can */
	shoal_manifest m = moe_model(GB);
	layers[2].n_expert = layers[3].n_expert = 0;
	layers[2].n_expert_used = layers[3].n_expert_used = 0;
	shoal_policy pol = policy();
	shoal_view *v = two_peers(6 * GB, 400, 400, 2000000);
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	uint32_t cnt[8];
	int rep;
	ASSERT_EQ(count_owners(p, 1, cnt, &rep), 2);
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		ASSERT_LE(pp->weight_bytes + pp->kv_bytes, 6 * GB);
	}
	shoal_plan_free(p);
	/* and at 3 GB each nothing fits: a clear refusal */
	shoal_view_free(v);
	v = two_peers(3 * GB, 400, 400, 2000000);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	ASSERT_TRUE(strstr(why, "needs") != NULL);
	shoal_view_free(v);
}

static void test_spread_policy_balances_by_speed(void)
{
	/* a at 600 GB/s, b at 300 GB/s; the policy asks to spread */
	shoal_manifest m = moe_model(GB / 10);
	shoal_policy pol = policy();
	pol.spread_experts = true;
	shoal_view *v = two_peers(100 * GB, 600, 300, 2000000);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_peers(p), 2);
	for (uint32_t l = 1; l < 4; l++) {
		uint32_t cnt[8];
		int rep;
		ASSERT_EQ(count_owners(p, l, cnt, &rep), 2);
		/* plan peers in id order: a = 0, b = 1; 2:1 by speed, +-1 */
		ASSERT_GE(cnt[0], 4);
		ASSERT_LE(cnt[0], 6);
		ASSERT_EQ(cnt[0] + cnt[1], NE);
	}
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_hot_experts_replicated(void)
{
	/* fast links; expert 3 of every MoE layer gets 20x the tokens */
	shoal_manifest m = moe_model(GB / 10);
	shoal_policy pol = policy();
	pol.spread_experts = true;
	shoal_view *v = two_peers(100 * GB, 400, 400, 5000);
	for (uint32_t l = 1; l < 4; l++)
		for (uint32_t e = 0; e < NE; e++)
			shoal_view_set_expert_count(v, l, e, e == 3 ? 2000 : 100);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	for (uint32_t l = 1; l < 4; l++) {
		uint32_t own[SHOAL_PLAN_MAX_OWNERS];
		ASSERT_EQ(shoal_plan_expert_owners(p, l, 3, own), 2);
		ASSERT_EQ(shoal_plan_expert_owners(p, l, 0, own), 1);
	}
	uint64_t t_hot = shoal_plan_predicted_ns(p);
	shoal_plan_free(p);
	/* no memory to spare: no replicas (2.9 GB for 2.802 GB of weights,
	 * less than one more expert) */
	shoal_view_free(v);
	v = two_peers(1450000000ULL, 400, 400, 5000);
	for (uint32_t l = 1; l < 4; l++)
		for (uint32_t e = 0; e < NE; e++)
			shoal_view_set_expert_count(v, l, e, e == 3 ? 2000 : 100);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	int reps = 0;
	for (uint32_t l = 1; l < 4; l++) {
		uint32_t cnt[8];
		int rep;
		count_owners(p, l, cnt, &rep);
		reps += rep;
	}
	ASSERT_EQ(reps, 0);
	ASSERT_GT(shoal_plan_predicted_ns(p), t_hot);
	shoal_plan_free(p);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_kept_by_default), TEST_CASE(test_spread_when_memory_requires),
          TEST_CASE(test_spread_policy_balances_by_speed), TEST_CASE(test_hot_experts_replicated))
