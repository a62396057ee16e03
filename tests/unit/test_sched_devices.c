/*
 * tests/unit/test_sched_devices.c: a peer's GPU in the plan.
 *   - a small GPU takes the stage's first layers, the rest run on the CPU
 *     (the split inside the peer), the head stays on the CPU;
 *   - a GPU that holds everything takes every layer and the head;
 *   - the predicted time adds each part at its own device's figures
 *     (bandwidth-bound decode, and the multiply rate where it binds);
 *   - a discrete GPU adds its memory to the host's, a unified one does not;
 *   - between two peers the layers go where the GPU is;
 *   - the split is in the encoding (version 2, decoded back, checked) and
 *     a kept plan whose split would change is planned anew;
 *   - random clusters with GPUs: the same plan in any peer order, splits
 *     within their stages, every plan decodes to its own digest.
 */
#include "tests/unit/test.h"
#include "tests/unit/test_sched_util.h"

#define GB 1000000000ULL

static shoal_manifest_layer layers[32];

/* L dense layers of 1 GB and 2 GFLOP each, 1 MB embedding and head, no KV. */
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

/* A peer: host memory and CPU bandwidth; gpu_gb 0: no GPU. Compute never
 * binds unless a test lowers it. */
static shoal_view_peer peer(uint8_t id, const char *name, uint64_t mem_gb, uint64_t bw_gbs,
                            uint64_t gpu_gb, uint64_t gpu_bw_gbs)
{
	shoal_view_peer p;
	memset(&p, 0, sizeof p);
	p.id.b[15] = id;
	snprintf(p.name, sizeof p.name, "%s", name);
	p.mem_bytes = mem_gb * GB;
	p.mem_bw = bw_gbs * GB;
	p.flops = 100000 * GB;
	p.gpu_mem = gpu_gb * GB;
	p.gpu_bw = gpu_bw_gbs * GB;
	p.gpu_flops = gpu_gb ? 1000000 * GB : 0;
	return p;
}

static shoal_view *view_of(const shoal_view_peer *ps, int n)
{
	shoal_view *v = shoal_view_new(20000, 5 * GB);
	for (int i = 0; v && i < n; i++)
		if (shoal_view_add_peer(v, &ps[i], NULL, 0) != SHOAL_OK) {
			shoal_view_free(v);
			return NULL; /* the test's shoal_schedule then fails loudly */
		}
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

/* ceil(bytes x 1e9 / rate) ns: the cost model's unit time */
static uint64_t ns_at(uint64_t bytes, uint64_t rate)
{
	return (uint64_t)(((unsigned __int128)bytes * GB + rate - 1) / rate);
}

static void test_small_gpu_takes_first_layers(void)
{
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	/* 4 GB of GPU at 800 GB/s, 64 GB of host at 50 GB/s */
	shoal_view_peer ps[1] = {peer(1, "box", 64, 50, 4, 800)};
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p = NULL;
	char why[256];
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(p), 1);
	const shoal_plan_stage *s = shoal_plan_stage_at(p, 0);
	ASSERT_EQ(s->first_layer, 0);
	ASSERT_EQ(s->end_layer, 20);
	ASSERT_EQ(s->gpu_end, 4); /* 4 layers of 1 GB fill the 4 GB GPU */
	ASSERT_FALSE(shoal_plan_head_gpu(p));
	/* each part at its device's bandwidth, the head on the CPU */
	uint64_t want =
	    4 * ns_at(GB, 800 * GB) + 16 * ns_at(GB, 50 * GB) + ns_at(m.head_bytes, 50 * GB);
	ASSERT_U64_EQ(shoal_plan_predicted_ns(p), want);
	/* without the GPU every layer streams at the CPU's 50 GB/s */
	shoal_view_peer cpu_only = peer(1, "box", 64, 50, 0, 0);
	shoal_view *w = view_of(&cpu_only, 1);
	shoal_plan *q = NULL;
	ASSERT_EQ(shoal_schedule(w, &m, &pol, NULL, &q, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(q, 0)->gpu_end, 0);
	ASSERT_U64_EQ(shoal_plan_predicted_ns(q),
	              20 * ns_at(GB, 50 * GB) + ns_at(m.head_bytes, 50 * GB));
	shoal_plan_free(q);
	shoal_view_free(w);
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_big_gpu_takes_all(void)
{
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	shoal_view_peer ps[1] = {peer(1, "mac", 192, 100, 64, 819)};
	ps[0].gpu_unified = true;
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(p, 0)->gpu_end, 20);
	ASSERT_TRUE(shoal_plan_head_gpu(p));
	ASSERT_U64_EQ(shoal_plan_predicted_ns(p),
	              20 * ns_at(GB, 819 * GB) + ns_at(m.head_bytes, 819 * GB));
	/* a unified GPU's bytes are host bytes: the weights count once */
	const shoal_plan_peer *pp = shoal_plan_peer_at(p, 0);
	ASSERT_U64_EQ(pp->weight_bytes, 20 * GB + m.embd_bytes + m.head_bytes);
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_multiply_rate_binds_on_gpu(void)
{
	shoal_manifest m = dense_model(8);
	for (uint32_t l = 0; l < 8; l++)
		layers[l].flops = 4000 * GB; /* a batch's worth of work per layer */
	shoal_policy pol = policy();
	shoal_view_peer ps[1] = {peer(1, "box", 64, 50, 4, 800)};
	ps[0].gpu_flops = 20000 * GB; /* 20 TFLOP/s: 200 ms a layer */
	ps[0].flops = 1000 * GB;      /* 1 TFLOP/s on the CPU: 4 s a layer */
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(p, 0)->gpu_end, 4);
	uint64_t want = 4 * ns_at(4000 * GB, 20000 * GB) + 4 * ns_at(4000 * GB, 1000 * GB) +
	                ns_at(m.head_bytes, 50 * GB);
	ASSERT_U64_EQ(shoal_plan_predicted_ns(p), want);
	shoal_plan_free(p);
	shoal_view_free(v);
}

static void test_discrete_gpu_adds_memory(void)
{
	/* 20 GB of layers; 16 GB of host and an 8 GB GPU */
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	shoal_view_peer ps[1] = {peer(1, "box", 16, 50, 8, 400)};
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p = NULL;
	char why[256];
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(p, 0)->gpu_end, 8);
	shoal_plan_free(p);
	shoal_view_free(v);
	/* the same memory shared with the host holds only 16 GB */
	ps[0].gpu_unified = true;
	v = view_of(ps, 1);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_ERR_INFEASIBLE);
	ASSERT_TRUE(strstr(why, "offers") != NULL);
	shoal_view_free(v);
}

static void test_layers_go_to_the_gpu_peer(void)
{
	/* two peers each able to hold the model: the one whose GPU holds it
	 * all runs it; a peer with a bad GPU figure is refused */
	shoal_manifest m = dense_model(10);
	shoal_policy pol = policy();
	shoal_view_peer ps[2] = {peer(1, "cpu", 64, 100, 0, 0), peer(2, "gpu", 32, 50, 16, 900)};
	shoal_view *v = view_of(ps, 2);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_n_stages(p), 1);
	const shoal_plan_stage *s = shoal_plan_stage_at(p, 0);
	ASSERT_STR_EQ(shoal_plan_peer_at(p, s->peer)->name, "gpu");
	ASSERT_EQ(s->gpu_end, 10);
	shoal_plan_free(p);
	shoal_view_free(v);
	shoal_view_peer bad = peer(3, "bad", 64, 50, 8, 0);
	v = shoal_view_new(20000, 5 * GB);
	char why[256];
	ASSERT_EQ(shoal_view_add_peer(v, &bad, why, sizeof why), SHOAL_ERR_INVAL);
	ASSERT_TRUE(strstr(why, "GPU") != NULL);
	shoal_view_free(v);
}

static void test_split_encoded_and_kept(void)
{
	shoal_manifest m = dense_model(20);
	shoal_policy pol = policy();
	shoal_view_peer ps[1] = {peer(1, "box", 64, 50, 4, 800)};
	shoal_view *v = view_of(ps, 1);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, NULL, 0), SHOAL_OK);
	uint8_t *enc = NULL;
	size_t len = 0;
	ASSERT_EQ(shoal_plan_encode(p, &enc, &len), SHOAL_OK);
	ASSERT_EQ(enc[4], 2); /* version 2: a GPU part */
	shoal_plan *d = NULL;
	char why[256];
	ASSERT_EQ(shoal_plan_decode(enc, len, &d, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(d, 0)->gpu_end, 4);
	ASSERT_MEM_EQ(shoal_plan_digest(d), shoal_plan_digest(p), SHOAL_DIGEST_BYTES);
	shoal_plan_free(d);
	/* a GPU end past the stage is refused: n_stage x gpu_end, head_gpu
	 * are the last 8 bytes */
	enc[len - 8] = 21;
	ASSERT_EQ(shoal_plan_decode(enc, len, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "GPU") != NULL);
	/* the head on a GPU that does not end the stage is refused */
	enc[len - 8] = 4;
	enc[len - 4] = 1;
	ASSERT_EQ(shoal_plan_decode(enc, len, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	/* version 2 without a GPU part is not canonical */
	enc[len - 8] = 0;
	enc[len - 4] = 0;
	ASSERT_EQ(shoal_plan_decode(enc, len, &d, why, sizeof why), SHOAL_ERR_FORMAT);
	free(enc);

	/* the same view keeps the plan, digest and epoch */
	shoal_plan *k = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p, &k, NULL, 0), SHOAL_OK);
	ASSERT_TRUE(shoal_plan_kept(k));
	ASSERT_MEM_EQ(shoal_plan_digest(k), shoal_plan_digest(p), SHOAL_DIGEST_BYTES);
	shoal_plan_free(k);
	shoal_view_free(v);
	/* a GPU of 5 GB: the same stage with another split is a new plan */
	ps[0].gpu_mem = 5 * GB;
	v = view_of(ps, 1);
	ASSERT_EQ(shoal_schedule(v, &m, &pol, p, &k, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_plan_stage_at(k, 0)->gpu_end, 5);
	ASSERT_FALSE(shoal_plan_kept(k));
	ASSERT_U64_EQ(shoal_plan_epoch(k), shoal_plan_epoch(p) + 1);
	shoal_plan_free(k);
	shoal_view_free(v);
	shoal_plan_free(p);
}

static void test_random_gpu_clusters(void)
{
	ti_rng r = {34}, perm = {3434};
	int planned = 0, split = 0;
	for (int it = 0; it < 600; it++) {
		ti_inst t;
		int n = (int)ti_range(&r, 1, ti_range(&r, 0, 9) ? 6 : 11);
		ti_random(&t, &r, n, (int)ti_range(&r, 1, 12), ti_range(&r, 0, 1));
		for (int i = 0; i < n; i++) { /* half the peers get a GPU */
			shoal_view_peer *vp = &t.p[i];
			if (ti_range(&r, 0, 1))
				continue;
			vp->gpu_mem = vp->mem_bytes / 4 + ti_range(&r, 0, vp->mem_bytes);
			vp->gpu_bw = ti_range(&r, 100, 3000) * TI_GB;
			vp->gpu_flops = ti_range(&r, 2000, 200000) * TI_GB;
			vp->gpu_unified = ti_range(&r, 0, 1);
		}
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
			if (k) {
				ASSERT_EQ(e, ref_e);
				if (!e)
					ASSERT_MEM_EQ(shoal_plan_digest(p), ref, sizeof ref);
				shoal_plan_free(p);
				shoal_view_free(v);
				continue;
			}
			ref_e = e;
			if (!e) {
				memcpy(ref, shoal_plan_digest(p), sizeof ref);
				for (size_t i = 0; i < shoal_plan_n_stages(p); i++) {
					const shoal_plan_stage *st = shoal_plan_stage_at(p, i);
					ASSERT_GE(st->gpu_end, st->first_layer);
					ASSERT_LE(st->gpu_end, st->end_layer);
					split += st->gpu_end > st->first_layer &&
					         st->gpu_end < st->end_layer;
				}
				uint8_t *enc = NULL;
				size_t len = 0;
				shoal_plan *d = NULL;
				ASSERT_EQ(shoal_plan_encode(p, &enc, &len), SHOAL_OK);
				ASSERT_EQ(shoal_plan_decode(enc, len, &d, NULL, 0), SHOAL_OK);
				ASSERT_MEM_EQ(shoal_plan_digest(d), ref, sizeof ref);
				shoal_plan_free(d);
				free(enc);
			}
			shoal_plan_free(p);
			shoal_view_free(v);
		}
		planned += ref_e == SHOAL_OK;
	}
	printf("  %d of 600 planned, %d stages split between GPU and CPU\n", planned, split);
	ASSERT_GT(planned, 300);
	ASSERT_GT(split, 20);
}

TEST_MAIN(TEST_CASE(test_small_gpu_takes_first_layers), TEST_CASE(test_big_gpu_takes_all),
          TEST_CASE(test_multiply_rate_binds_on_gpu), TEST_CASE(test_discrete_gpu_adds_memory),
          TEST_CASE(test_layers_go_to_the_gpu_peer), TEST_CASE(test_split_encoded_and_kept),
          TEST_CASE(test_random_gpu_clusters))
