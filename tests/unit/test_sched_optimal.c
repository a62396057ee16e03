/*
 * tests/unit/test_sched_optimal.c: on small instances (<= 5 peers, <= 12 layers)
 * the plan's predicted time equals the optimum found by brute force over
 * every peer subset, order and split, written here from the cost model's
 * statement (scheduler/schedule.c), not from the scheduler's code.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

typedef struct bf {
	const ti_inst *t;
	const shoal_policy *pol;
	int n, L;
	uint64_t lt[TI_MAX_PEERS][TI_MAX_LAYERS]; /* layer time, experts local */
	uint64_t lm[TI_MAX_LAYERS];               /* layer memory */
	uint64_t hop[TI_MAX_PEERS][TI_MAX_PEERS];
	uint64_t head[TI_MAX_PEERS], cap[TI_MAX_PEERS];
	uint64_t best;
	long visited;
} bf;

static void bf_init(bf *b, const ti_inst *t, const shoal_policy *pol)
{
	memset(b, 0, sizeof *b);
	b->t = t;
	b->pol = pol;
	b->n = t->n;
	b->L = (int)t->m.n_layer;
	b->best = UINT64_MAX;
	for (int l = 0; l < b->L; l++) {
		const shoal_manifest_layer *y = &t->layers[l];
		b->lm[l] = y->bytes + y->n_expert * y->expert_bytes +
		           y->kv_bytes_per_token * pol->ctx * pol->sessions;
	}
	for (int p = 0; p < b->n; p++) {
		const shoal_view_peer *vp = &t->p[p];
		uint64_t bw = ti_eff(vp->mem_bw, vp->load_pct),
		         fl = ti_eff(vp->flops, vp->load_pct);
		b->cap[p] = ti_cap(vp, pol);
		for (int l = 0; l < b->L; l++) {
			const shoal_manifest_layer *y = &t->layers[l];
			uint64_t af = y->attn_flops_per_ctx ? y->attn_flops_per_ctx
			                                    : y->kv_bytes_per_token / 2;
			uint64_t x =
			    ti_max(ti_ceil_ns(y->bytes + y->kv_bytes_per_token * pol->ctx, bw),
			           ti_ceil_ns(y->flops + af * pol->ctx, fl));
			if (y->n_expert)
				x += ti_max(
				    ti_ceil_ns(
				        (unsigned __int128)y->n_expert_used * y->expert_bytes, bw),
				    ti_ceil_ns(
				        (unsigned __int128)y->n_expert_used * y->expert_flops, fl));
			b->lt[p][l] = x;
		}
		b->head[p] =
		    ti_max(ti_ceil_ns(t->m.head_bytes, bw), ti_ceil_ns(t->m.head_flops, fl));
		for (int q = 0; q < b->n; q++) {
			uint64_t lat = t->def_lat, lbw = t->def_bw;
			for (int k = 0; k < t->nl; k++)
				if ((t->l[k].a == p && t->l[k].b == q) ||
				    (t->l[k].a == q && t->l[k].b == p)) {
					lat = t->l[k].lat;
					lbw = t->l[k].bw;
				}
			b->hop[p][q] = lat + ti_ceil_ns(t->m.act_bytes_per_token, lbw);
		}
	}
}

static void bf_rec(bf *b, int depth, int prev, unsigned used, int start, uint64_t acc)
{
	const shoal_manifest *m = &b->t->m;
	for (int q = 0; q < b->n; q++) {
		if (used >> q & 1)
			continue;
		uint64_t mem = 0, t = acc + (depth ? b->hop[prev][q] : 0);
		for (int end = start + 1; end <= b->L; end++) {
			mem += b->lm[end - 1];
			t += b->lt[q][end - 1];
			bool first = depth == 0, last = end == b->L;
			uint64_t extra = first && last
			                     ? (m->tied_head ? ti_max(m->embd_bytes, m->head_bytes)
			                                     : m->embd_bytes + m->head_bytes)
			                 : first ? m->embd_bytes
			                 : last  ? m->head_bytes
			                         : 0;
			b->visited++;
			if (mem + extra > b->cap[q])
				continue;
			if (last) {
				if (t + b->head[q] < b->best)
					b->best = t + b->head[q];
			} else {
				bf_rec(b, depth + 1, q, used | 1u << q, end, t);
			}
		}
	}
}

static bool all_local(const shoal_plan *p)
{
	for (size_t i = 0; i < shoal_plan_n_stages(p); i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		for (uint32_t l = s->first_layer; l < s->end_layer; l++)
			for (uint32_t e = 0; e < shoal_plan_layer_n_expert(p, l); e++) {
				uint32_t own[SHOAL_PLAN_MAX_OWNERS];
				if (shoal_plan_expert_owners(p, l, e, own) != 1 ||
				    own[0] != s->peer)
					return false;
			}
	}
	return true;
}

static void run(bool moe, int instances, uint64_t seed)
{
	ti_rng r = {seed};
	int compared = 0, infeasible = 0;
	for (int it = 0; it < instances; it++) {
		ti_inst t;
		ti_random(&t, &r, (int)ti_range(&r, 1, 5), (int)ti_range(&r, 1, 12), moe);
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.ctx = (uint32_t)ti_range(&r, 1, 4096);
		pol.sessions = (uint32_t)ti_range(&r, 1, 2);
		shoal_view *v = ti_view(&t, NULL);
		shoal_plan *p = NULL;
		char why[SHOAL_WHY_LEN];
		shoal_err e = shoal_schedule(v, &t.m, &pol, NULL, &p, why, sizeof why);
		bf b;
		bf_init(&b, &t, &pol);
		bf_rec(&b, 0, 0, 0, 0, 0);
		if (e) {
			ASSERT_EQ(e, SHOAL_ERR_INFEASIBLE);
			ASSERT_U64_EQ(b.best, UINT64_MAX); /* brute force found nothing either */
			infeasible++;
		} else if (b.best == UINT64_MAX) {
			/* only possible by spreading experts off their layer */
			ASSERT_FALSE(all_local(p));
		} else if (all_local(p)) {
			if (shoal_plan_predicted_ns(p) != b.best)
				fprintf(stderr, "instance %d: n=%d L=%u\n", it, t.n, t.m.n_layer);
			ASSERT_U64_EQ(shoal_plan_predicted_ns(p), b.best);
			compared++;
		} else {
			/* spreading is chosen only when it beats keeping */
			if (shoal_plan_predicted_ns(p) >= b.best)
				fprintf(stderr,
				        "instance %d: n=%d L=%u plan %llu brute %llu stages %zu\n",
				        it, t.n, t.m.n_layer,
				        (unsigned long long)shoal_plan_predicted_ns(p),
				        (unsigned long long)b.best, shoal_plan_n_stages(p));
			ASSERT_TRUE(shoal_plan_predicted_ns(p) < b.best);
		}
		shoal_plan_free(p);
		shoal_view_free(v);
	}
	printf("  %d compared with brute force, %d infeasible\n", compared, infeasible);
	ASSERT_GT(compared, instances / 4);
	ASSERT_GT(infeasible, 0);
}

/* Above 8 peers the search is a heuristic: measure it against the brute
 * force on 9-11 peers and up to 5 layers (every subset, order and split). It
 * must find a plan whenever one exists, be optimal on most instances and
 * never be far off. */
static void test_heuristic_near_optimal(void)
{
	ti_rng r = {77};
	int compared = 0, optimal = 0;
	double worst = 1.0, sum = 0;
	for (int it = 0; it < 150; it++) {
		ti_inst t;
		int n = (int)ti_range(&r, 9, 11);
		int L = (int)ti_range(&r, 1, 5);
		ti_random(&t, &r, n, L, false);
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.ctx = (uint32_t)ti_range(&r, 1, 4096);
		shoal_view *v = ti_view(&t, NULL);
		shoal_plan *p = NULL;
		shoal_err e = shoal_schedule(v, &t.m, &pol, NULL, &p, NULL, 0);
		bf b;
		bf_init(&b, &t, &pol);
		bf_rec(&b, 0, 0, 0, 0, 0);
		if (b.best == UINT64_MAX) {
			ASSERT_EQ(e, SHOAL_ERR_INFEASIBLE);
		} else {
			ASSERT_EQ(e, SHOAL_OK);
			double ratio = (double)shoal_plan_predicted_ns(p) / (double)b.best;
			ASSERT_TRUE(ratio >= 1.0);
			optimal += ratio == 1.0;
			sum += ratio;
			if (ratio > worst)
				worst = ratio;
			compared++;
		}
		shoal_plan_free(p);
		shoal_view_free(v);
	}
	printf("  %d compared: %d optimal, mean %.4f, worst %.4f x the optimum\n", compared,
	       optimal, compared ? sum / compared : 0, worst);
	ASSERT_GT(compared, 75);
	ASSERT_GE(optimal * 10, compared * 8); /* optimal on 80 % or more */
	ASSERT_TRUE(worst < 1.25);
}

static void test_optimal_dense(void)
{
	run(false, 400, 1);
}
static void test_optimal_moe_kept(void)
{
	run(true, 300, 2);
}

TEST_MAIN(TEST_CASE(test_optimal_dense), TEST_CASE(test_optimal_moe_kept),
          TEST_CASE(test_heuristic_near_optimal))
