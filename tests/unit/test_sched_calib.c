/*
 * tests/unit/test_sched_calib.c: the calibrated cost model against published
 * runs (issue 39, acceptance 1), and the calibration fields' edges.
 *
 * The shipped example scheduler/examples/mac-studio-x4.json (4x Mac Studio
 * M3 Ultra, Thunderbolt 5) with models/specs/deepseek-v3.1-q4_k_m.json,
 * planned on 1, 2 and 4 of its machines, and each prediction checked
 * within 20 % of what was published for that hardware and model
 * (models/specs/README.md, "Calibration", gives the sources and dates):
 *
 *   exo 1.0 (MLX), tensor parallel over RDMA on Thunderbolt 5:
 *                                 21.1 / 27.8 / 32.5 tok/s on 1 / 2 / 4
 *   llama.cpp RPC, pipeline over TCP (on Thunderbolt 5):
 *                                 14.8 / 16.0 / 14.6 tok/s on 1 / 2 / 4
 *   (the figures as issue 39 quotes them from the published charts of the
 *   test in Jeff Geerling's "1.5 TB of VRAM on Mac Studio - RDMA over
 *   Thunderbolt 5", December 2025)
 *
 * Which engine: shoal's prediction is for shoal's engine, and nobody has
 * published shoal on this hardware. The example's factors map the
 * published engines onto shoal's cost model: the share of the memory's
 * bandwidth a layer gets (CPU and GPU alike), fitted to llama.cpp's three
 * figures (the shipped file's: the same GGUF Q4_K_M file) and to exo's
 * one-machine figure ("exo_efficiency", which the RDMA runs below put on
 * every device); the per-round cost of a tensor group from exo's two-
 * machine figure; links from the published TCP and RDMA latencies. Only
 * exo's one- and two-machine checks hold by construction; the others are
 * predictions of the model.
 */
#include "tests/unit/test.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "models/spec.h"
#include "runtime/node/plan_json.h"
#include "scheduler/plan.h"

/* helpers that return a value stop the program on a failed check */
#define MUST(c)                                                                                    \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #c);             \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	MUST(f != NULL);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	MUST(s != NULL);
	MUST((fread(s, 1, (size_t)n, f)) == ((size_t)n));
	s[n] = '\0';
	fclose(f);
	return s;
}

static const char *srcdir(void)
{
	const char *s = getenv("SHOAL_SRCDIR");
	return s ? s : ".";
}

/* The example's JSON: the first `k` peers (the 512 GB ones first), its
 * links as RDMA or (rdma false) as TCP with the example's "tcp_link"
 * figures and the GPU factor of the engine that ran there. */
static shoal_view *example_view(const json_t *ex, size_t k, bool rdma)
{
	json_t *o = json_deep_copy(ex);
	MUST(o != NULL);
	json_t *peers = json_object_get(o, "peers");
	while (json_array_size(peers) > k)
		json_array_remove(peers, json_array_size(peers) - 1);
	const json_t *cal = json_object_get(o, "calibration");
	MUST(json_is_object(cal));
	const json_t *tcp = json_object_get(cal, "tcp_link");
	MUST(json_is_object(tcp));
	/* every link of the example is its default_link: keep that alone,
	 * as links name peers this subset may lack */
	json_object_del(o, "links");
	if (!rdma)
		json_object_set(o, "default_link", (json_t *)tcp);
	size_t i;
	json_t *p;
	json_array_foreach(peers, i, p)
	{
		json_t *g = json_object_get(p, "gpu");
		MUST(json_is_object(g));
		if (rdma) {
			json_object_set(g, "efficiency", json_object_get(cal, "exo_efficiency"));
			json_object_set(p, "efficiency", json_object_get(cal, "exo_efficiency"));
		} else
			json_object_set(p, "hop_us", json_object_get(cal, "tcp_hop_us"));
	}
	char *text = json_dumps(o, 0);
	json_decref(o);
	shoal_view *v = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_err e = shoal_cluster_parse(text, strlen(text), &v, why, sizeof why);
	if (e)
		fprintf(stderr, "cluster: %s\n", why);
	MUST((e) == (SHOAL_OK));
	free(text);
	return v;
}

static double plan_tps(const shoal_view *v, const shoal_manifest *m, bool tensor, size_t *groups,
                       size_t *stages)
{
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.tensor_groups = tensor;
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_err e = shoal_schedule(v, m, &pol, NULL, &p, why, sizeof why);
	if (e)
		fprintf(stderr, "plan: %s\n", why);
	MUST((e) == (SHOAL_OK));
	double tps = 1e9 / (double)shoal_plan_predicted_ns(p);
	/* a group's members compute on their unified GPUs (cost.c: tpbw):
	 * their shares are on them, as the plan says (not 0) */
	for (size_t i = 0; tensor && shoal_plan_n_groups(p) && i < shoal_plan_n_peers(p); i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		uint64_t b = pp->weight_bytes + pp->kv_bytes;
		MUST(pp->gpu_unified && pp->gpu_capacity);
		MUST(pp->gpu_bytes == (b < pp->gpu_capacity ? b : pp->gpu_capacity));
		MUST(pp->gpu_bytes > 0);
	}
	/* and each stage's predicted time is within the token's */
	uint64_t sum = 0;
	for (size_t i = 0; i < shoal_plan_n_stages(p); i++)
		sum += shoal_plan_stage_at(p, i)->predicted_ns;
	MUST(sum > 0 && sum <= shoal_plan_predicted_ns(p));
	*groups = shoal_plan_n_groups(p);
	*stages = shoal_plan_n_stages(p);
	shoal_plan_free(p);
	return tps;
}

static void test_mac_studio_deepseek(void)
{
	/* expected tok/s: see the header (published; issue 39) */
	static const struct {
		size_t k;
		bool rdma;
		double tps;
	} want[] = {
	    {1, false, 14.8}, {2, false, 16.0}, {4, false, 14.6}, /* llama.cpp RPC, TCP */
	    {1, true, 21.1},  {2, true, 27.8},  {4, true, 32.5},  /* exo, RDMA, tensor */
	};
	char path[512], why[SHOAL_WHY_LEN];
	snprintf(path, sizeof path, "%s/scheduler/examples/mac-studio-x4.json", srcdir());
	char *text = slurp(path);
	json_error_t je;
	json_t *ex = json_loads(text, 0, &je);
	ASSERT_TRUE(ex != NULL);
	free(text);
	snprintf(path, sizeof path, "%s/models/specs/deepseek-v3.1-q4_k_m.json", srcdir());
	shoal_manifest m;
	shoal_spec_info info;
	ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		shoal_view *v = example_view(ex, want[i].k, want[i].rdma);
		size_t groups, stages;
		double tps = plan_tps(v, &m, want[i].rdma, &groups, &stages);
		fprintf(stderr,
		        "%zu machine%s, %s: predicted %.1f tok/s, published %.1f (%+.0f %%)"
		        " [%zu stages, %zu groups]\n",
		        want[i].k, want[i].k > 1 ? "s" : "",
		        want[i].rdma ? "tensor/RDMA" : "pipeline/TCP", tps, want[i].tps,
		        100.0 * (tps / want[i].tps - 1), stages, groups);
		ASSERT_NEAR(tps, want[i].tps, want[i].tps * 0.20);
		/* the RDMA runs are tensor parallel: one group of all k. A
		 * shoal group runs DeepSeek's MLA attention whole on every
		 * member (engine_tp.c), which the plan counts, and for 2
		 * machines it then prefers a 2-stage pipeline (27.2 tok/s,
		 * within the bound of exo's group): either */
		if (want[i].rdma && want[i].k > 2) {
			ASSERT_EQ(groups, 1u);
			ASSERT_EQ(stages, 1u);
		} else if (want[i].rdma && want[i].k == 2) {
			ASSERT_TRUE((groups == 1u && stages == 1u) ||
			            (groups == 0u && stages == 2u));
		}
		if (!want[i].rdma)
			ASSERT_EQ(groups, 0u);
		shoal_view_free(v);
	}
	shoal_spec_manifest_fini(&m);
	json_decref(ex);
}

/* Efficiencies scale the prediction (half the bandwidth share: about
 * twice the time of a bandwidth-bound decode), a hop cost adds per hop,
 * and bad calibration input is refused with a reason. */
static void test_calibration_fields(void)
{
	const char *base = "{\"peers\":[{\"id\":\"00000000000000000000000000000001\","
	                   "\"memory\":\"512G\",\"bandwidth_gbs\":100,\"compute_gflops\":1000%s}]}";
	char text[512], why[SHOAL_WHY_LEN], path[512];
	snprintf(path, sizeof path, "%s/models/specs/llama-3.1-70b-q4_k_m.json", srcdir());
	shoal_manifest m;
	shoal_spec_info info;
	ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
	double t[2];
	const char *extra[2] = {"", ",\"efficiency\":{\"bandwidth\":0.5}"};
	for (int i = 0; i < 2; i++) {
		snprintf(text, sizeof text, base, extra[i]);
		shoal_view *v = NULL;
		ASSERT_EQ(shoal_cluster_parse(text, strlen(text), &v, why, sizeof why), SHOAL_OK);
		size_t g, s;
		t[i] = 1.0 / plan_tps(v, &m, false, &g, &s);
		/* the view survives a round trip through JSON with its factors */
		json_t *j = shoal_cluster_to_json(v);
		char *back = json_dumps(j, 0);
		shoal_view *v2 = NULL;
		ASSERT_EQ(shoal_cluster_parse(back, strlen(back), &v2, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_view_peer_at(v2, 0)->bw_eff_pm, i ? 500u : 0u);
		free(back);
		json_decref(j);
		shoal_view_free(v2);
		shoal_view_free(v);
	}
	ASSERT_NEAR(t[1] / t[0], 2.0, 0.1);
	static const char *bad[] = {
	    ",\"efficiency\":{\"bandwidth\":1.5}",
	    ",\"efficiency\":{\"compute\":0}",
	    ",\"efficiency\":3",
	    ",\"hop_us\":-1",
	    ",\"round_us\":\"x\"",
	    ",\"hop_us\":2e9",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(text, sizeof text, base, bad[i]);
		shoal_view *v = NULL;
		why[0] = '\0';
		ASSERT_NE(shoal_cluster_parse(text, strlen(text), &v, why, sizeof why), SHOAL_OK);
		ASSERT_TRUE(v == NULL);
		ASSERT_TRUE(why[0] != '\0');
	}
	shoal_spec_manifest_fini(&m);
}

/* The view refuses an efficiency over 1 from any source (gossip too). */
static void test_view_refuses(void)
{
	shoal_view *v = shoal_view_new(200000, 125000000);
	ASSERT_TRUE(v != NULL);
	shoal_view_peer p;
	memset(&p, 0, sizeof p);
	p.id.b[15] = 1;
	p.mem_bytes = 1ULL << 30;
	p.mem_bw = 1000000000;
	p.flops = 1000000000;
	p.gpu_bw_eff_pm = 1001;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_view_add_peer(v, &p, why, sizeof why), SHOAL_ERR_INVAL);
	p.gpu_bw_eff_pm = 0;
	p.round_ns = (1ULL << 40) + 1;
	ASSERT_EQ(shoal_view_add_peer(v, &p, why, sizeof why), SHOAL_ERR_INVAL);
	p.round_ns = 0;
	ASSERT_EQ(shoal_view_add_peer(v, &p, why, sizeof why), SHOAL_OK);
	shoal_view_free(v);
}

TEST_MAIN(TEST_CASE(test_view_refuses), TEST_CASE(test_calibration_fields),
          TEST_CASE(test_mac_studio_deepseek))
