/*
 * tests/unit/test_sched_safety.c: no plan ever puts more on a peer than its
 * memory less the headroom (recomputed here from the plan's assignment, on
 * thousands of random clusters and policies); every plan is well formed
 * (contiguous stages covering every layer, every expert owned); inputs that
 * cannot fit or make no sense give an error with a clear reason.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

static void check_plan(const ti_inst *t, const shoal_policy *pol, const shoal_plan *p)
{
	size_t np = shoal_plan_n_peers(p), ns = shoal_plan_n_stages(p);
	uint64_t mem[TI_MAX_PEERS] = {0};
	const shoal_manifest *m = &t->m;
	ASSERT_GE(ns, 1);
	uint32_t next = 0;
	for (size_t i = 0; i < ns; i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		ASSERT_EQ(s->first_layer, next);
		ASSERT_LT(s->first_layer, s->end_layer);
		ASSERT_LT(s->peer, np);
		for (uint32_t l = s->first_layer; l < s->end_layer; l++)
			mem[s->peer] += t->layers[l].bytes +
			                t->layers[l].kv_bytes_per_token * pol->ctx * pol->sessions;
		next = s->end_layer;
	}
	ASSERT_EQ(next, m->n_layer);
	for (uint32_t l = 0; l < m->n_layer; l++) {
		ASSERT_EQ(shoal_plan_layer_n_expert(p, l), t->layers[l].n_expert);
		for (uint32_t e = 0; e < t->layers[l].n_expert; e++) {
			uint32_t own[SHOAL_PLAN_MAX_OWNERS];
			size_t k = shoal_plan_expert_owners(p, l, e, own);
			ASSERT_GE(k, 1);
			for (size_t j = 0; j < k; j++) {
				ASSERT_LT(own[j], np);
				if (j)
					ASSERT_LT(own[j - 1], own[j]); /* distinct, ascending */
				mem[own[j]] += t->layers[l].expert_bytes;
			}
		}
	}
	uint32_t ep = shoal_plan_embd_peer(p), hp = shoal_plan_head_peer(p);
	ASSERT_EQ(ep, shoal_plan_stage_at(p, 0)->peer);
	ASSERT_EQ(hp, shoal_plan_stage_at(p, ns - 1)->peer);
	if (ep == hp)
		mem[ep] += m->tied_head ? ti_max(m->embd_bytes, m->head_bytes)
		                        : m->embd_bytes + m->head_bytes;
	else {
		mem[ep] += m->embd_bytes;
		mem[hp] += m->head_bytes; /* a tied head's matrix counts here too */
	}
	for (size_t i = 0; i < np; i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		const shoal_view_peer *vp = ti_find(t, &pp->id);
		ASSERT_TRUE(vp != NULL);
		ASSERT_LE(mem[i], ti_cap(vp, pol));
		ASSERT_U64_EQ(pp->weight_bytes + pp->kv_bytes, mem[i]);
		if (i)
			ASSERT_LT(shoal_peer_id_cmp(&shoal_plan_peer_at(p, i - 1)->id, &pp->id), 0);
	}
}

static void test_never_over_memory(void)
{
	ti_rng r = {2024};
	int planned = 0, refused = 0;
	for (int it = 0; it < 3000; it++) {
		ti_inst t;
		int n = ti_range(&r, 0, 9) ? (int)ti_range(&r, 1, 6) : (int)ti_range(&r, 9, 12);
		ti_random(&t, &r, n, (int)ti_range(&r, 1, 16), ti_range(&r, 0, 2) != 0);
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.ctx = (uint32_t)ti_range(&r, 0, 16384);
		pol.sessions = (uint32_t)ti_range(&r, 1, 4);
		pol.headroom_permille = (uint32_t)ti_range(&r, 0, 200);
		pol.spread_experts = ti_range(&r, 0, 3) == 0;
		shoal_view *v = ti_view(&t, NULL);
		shoal_plan *p = NULL;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why);
		if (e) {
			ASSERT_EQ(e, SHOAL_ERR_INFEASIBLE);
			ASSERT_TRUE(p == NULL);
			ASSERT_TRUE(strstr(why, "iB") != NULL); /* sizes in KiB..EiB */
			refused++;
		} else {
			check_plan(&t, &pol, p);
			planned++;
		}
		shoal_plan_free(p);
		shoal_view_free(v);
	}
	printf("  %d planned, %d refused\n", planned, refused);
	ASSERT_GT(planned, 1000);
	ASSERT_GT(refused, 100);
}

static void test_clear_reason(void)
{
	ti_rng r = {3};
	ti_inst t;
	ti_random(&t, &r, 3, 10, false);
	uint64_t total = t.m.embd_bytes + t.m.head_bytes;
	for (int l = 0; l < 10; l++)
		total += t.layers[l].bytes;
	for (int i = 0; i < 3; i++)
		t.p[i].mem_bytes = total / 4; /* three quarters of the model in all */
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.ctx = 0;
	shoal_view *v = ti_view(&t, NULL);
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	ASSERT_TRUE(strstr(why, "needs ") != NULL);
	ASSERT_TRUE(strstr(why, "the cluster offers") != NULL);
	/* enough in total, but one layer is bigger than any peer */
	t.layers[4].bytes = total;
	for (int i = 0; i < 3; i++)
		t.p[i].mem_bytes = total * 9 / 10;
	shoal_view_free(v);
	v = ti_view(&t, NULL);
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	ASSERT_TRUE(strstr(why, "layer 4 needs") != NULL);
	shoal_view_free(v);
}

static void test_bad_input(void)
{
	ti_rng r = {4};
	ti_inst t;
	ti_random(&t, &r, 2, 4, true);
	shoal_policy pol;
	shoal_policy_init(&pol);
	shoal_view *v = ti_view(&t, NULL);
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_manifest m = t.m;
	m.n_layer = 0;
	ASSERT_NE(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	m = t.m;
	m.layers = NULL;
	ASSERT_NE(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	shoal_manifest_layer bad[TI_MAX_LAYERS];
	memcpy(bad, t.layers, sizeof bad);
	bad[1].n_expert = 4;
	bad[1].n_expert_used = 5;
	m = t.m;
	m.layers = bad;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_RANGE);
	memcpy(bad, t.layers, sizeof bad);
	bad[2].bytes = UINT64_MAX;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_RANGE);
	/* a KV reservation too large to add up: refused, not wrapped around */
	memcpy(bad, t.layers, sizeof bad);
	for (int l = 0; l < 4; l++)
		bad[l].kv_bytes_per_token = 1u << 30;
	pol.ctx = 1u << 24;
	pol.sessions = 4096;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	ASSERT_TRUE(strstr(why, "EiB") != NULL);
	pol.sessions = 0;
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(p == NULL);
	/* the view refuses peers it could not plan on */
	shoal_view_peer vp = t.p[0];
	vp.id.b[0] ^= 0x80;
	vp.mem_bw = 0;
	ASSERT_EQ(shoal_view_add_peer(v, &vp, why, sizeof why), SHOAL_ERR_INVAL);
	vp.mem_bw = 1;
	vp.load_pct = 95;
	ASSERT_EQ(shoal_view_add_peer(v, &vp, why, sizeof why), SHOAL_ERR_INVAL);
	ASSERT_EQ(shoal_view_add_peer(v, &t.p[0], why, sizeof why), SHOAL_ERR_INVAL); /* twice */
	ASSERT_EQ(shoal_view_set_link(v, &t.p[0].id, &t.p[0].id, 1, 1, why, sizeof why),
	          SHOAL_ERR_INVAL);
	shoal_view_free(v);
	/* an empty view */
	v = shoal_view_new(1000, 1000);
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_never_over_memory), TEST_CASE(test_clear_reason),
          TEST_CASE(test_bad_input))
