/*
 * tests/unit/test_sched_determinism.c: the plan digest does not depend on the
 * order peers, links (and their direction) and routing counts are given in
 * (thousands of random clusters, some above the exact-search limit), and
 * golden digests of the example clusters x shipped specs pin the plans, so
 * that a platform or compiler that changes a plan is caught.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#include "models/spec.h"
#include "runtime/node/plan_json.h"

static void test_permutation_invariance(void)
{
	ti_rng r = {42}, perm = {4242};
	int planned = 0, heuristic = 0;
	for (int it = 0; it < 2000; it++) {
		ti_inst t;
		/* mostly small clusters; one in ten above 8 peers (heuristic) */
		int n = ti_range(&r, 0, 9) ? (int)ti_range(&r, 1, 6) : (int)ti_range(&r, 9, 12);
		ti_random(&t, &r, n, (int)ti_range(&r, 1, 12), ti_range(&r, 0, 1));
		shoal_policy pol;
		shoal_policy_init(&pol);
		pol.ctx = 1024;
		pol.spread_experts = ti_range(&r, 0, 7) == 0;
		uint8_t ref[SHOAL_DIGEST_BYTES];
		shoal_err ref_e = SHOAL_OK;
		for (int k = 0; k < 3; k++) {
			shoal_view *v = ti_view(&t, k ? &perm : NULL);
			shoal_plan *p = NULL;
			shoal_err e = shoal_schedule(v, &t.m, &pol, NULL, &p, NULL, 0);
			if (!k) {
				ref_e = e;
				if (!e)
					memcpy(ref, shoal_plan_digest(p), sizeof ref);
			} else {
				ASSERT_EQ(e, ref_e);
				if (!e)
					ASSERT_MEM_EQ(shoal_plan_digest(p), ref, sizeof ref);
			}
			shoal_plan_free(p);
			shoal_view_free(v);
		}
		planned += ref_e == SHOAL_OK;
		heuristic += ref_e == SHOAL_OK && n > 8;
	}
	printf("  %d of 2000 planned (%d above 8 peers), each in 3 orders\n", planned, heuristic);
	ASSERT_GT(planned, 1000);
	ASSERT_GT(heuristic, 50);
}

/* The digest covers the assignment: a different split changes it. */
static void test_digest_sensitive(void)
{
	ti_rng r = {7};
	ti_inst t;
	ti_random(&t, &r, 3, 8, false);
	for (int i = 0; i < 3; i++)
		t.p[i].mem_bytes = 1ULL << 50;
	shoal_policy pol;
	shoal_policy_init(&pol);
	shoal_view *v = ti_view(&t, NULL);
	shoal_plan *a = NULL, *b = NULL;
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &a, NULL, 0), SHOAL_OK);
	t.p[0].mem_bw *= 3; /* another peer becomes the fastest */
	t.p[1].mem_bw *= 5;
	shoal_view_free(v);
	v = ti_view(&t, NULL);
	ASSERT_EQ(shoal_schedule(v, &t.m, &pol, NULL, &b, NULL, 0), SHOAL_OK);
	uint8_t *ea, *eb;
	size_t la, lb;
	ASSERT_EQ(shoal_plan_encode(a, &ea, &la), SHOAL_OK);
	ASSERT_EQ(shoal_plan_encode(b, &eb, &lb), SHOAL_OK);
	bool same_enc = la == lb && !memcmp(ea, eb, la);
	bool same_dig = !memcmp(shoal_plan_digest(a), shoal_plan_digest(b), SHOAL_DIGEST_BYTES);
	ASSERT_EQ(same_enc, same_dig);
	ASSERT_MEM_EQ(ea, "SHPL\1\0\0\0", 8);
	free(ea);
	free(eb);
	shoal_plan_free(a);
	shoal_plan_free(b);
	shoal_view_free(v);
}

/* Golden digests: computed once on x86-64 Linux (gcc), written here. An
 * entry of "infeasible" means the model must not fit that cluster. */
static const struct {
	const char *cluster, *spec, *digest;
} golden[] = {
#include "tests/unit/sched_golden.inc"
};

static void test_golden(void)
{
	const char *src = getenv("SHOAL_SRCDIR");
	if (!src)
		src = ".";
	bool print = getenv("SHOAL_GOLDEN_PRINT") != NULL;
	for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
		char cp[512], sp[512], why[SHOAL_WHY_LEN];
		snprintf(cp, sizeof cp, "%s/scheduler/examples/%s.json", src, golden[i].cluster);
		snprintf(sp, sizeof sp, "%s/models/specs/%s.json", src, golden[i].spec);
		shoal_view *v = NULL;
		shoal_manifest m;
		ASSERT_EQ(shoal_cluster_load(cp, &v, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_spec_load(sp, &m, NULL, why, sizeof why), SHOAL_OK);
		shoal_policy pol;
		shoal_policy_init(&pol);
		shoal_plan *p = NULL;
		shoal_err e = shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why);
		char hex[65] = "infeasible";
		if (!e)
			shoal_digest_hex(shoal_plan_digest(p), hex);
		if (print)
			printf("\t{\"%s\", \"%s\", \"%s\"},\n", golden[i].cluster, golden[i].spec,
			       hex);
		else
			ASSERT_STR_EQ(hex, golden[i].digest);
		shoal_plan_free(p);
		shoal_view_free(v);
		shoal_spec_manifest_fini(&m);
	}
}

TEST_MAIN(TEST_CASE(test_permutation_invariance), TEST_CASE(test_digest_sensitive),
          TEST_CASE(test_golden))
