/*
 * tests/unit/test_sched_spec.c: model specs -> manifests (the shipped specs give
 * the published parameter counts; the quant table; bad specs refused with a
 * reason), cluster JSON -> view (sizes, defaults, links by name, errors),
 * and the plan's JSON object (the documented keys, stable text).
 */
#include "tests/unit/test.h"

#include "models/spec.h"
#include "runtime/node/plan_json.h"

static void spec_path(char *buf, size_t len, const char *name)
{
	const char *src = getenv("SHOAL_SRCDIR");
	snprintf(buf, len, "%s/models/specs/%s.json", src ? src : ".", name);
}

static uint64_t total_bytes(const shoal_manifest *m)
{
	uint64_t t = m->embd_bytes + m->head_bytes;
	for (uint32_t l = 0; l < m->n_layer; l++)
		t += m->layers[l].bytes + m->layers[l].n_expert * m->layers[l].expert_bytes;
	return t;
}

static void test_shipped_specs(void)
{
	/* published totals (billions): DeepSeek-V3 671 (37 active) without
	 * its MTP module, Qwen3-235B-A22B 235 (22), Qwen3-30B-A3B 30.5 (3.3),
	 * Llama-3.1-70B 70.6 */
	static const struct {
		const char *name;
		double total, active;
		uint32_t layers, moe_layers, experts;
	} want[] = {
	    {"deepseek-v3", 671, 37, 61, 58, 256},
	    {"qwen3-235b-a22b", 235, 22, 94, 94, 128},
	    {"qwen3-30b-a3b", 30.5, 3.3, 48, 48, 128},
	    {"llama-3.1-70b", 70.6, 70.6, 80, 0, 0},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		uint64_t bytes[2];
		for (int q = 0; q < 2; q++) {
			char path[512], name[64], why[SHOAL_WHY_LEN];
			snprintf(name, sizeof name, "%s-%s", want[i].name, q ? "q8_0" : "q4_k_m");
			spec_path(path, sizeof path, name);
			shoal_manifest m;
			shoal_spec_info info;
			ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
			ASSERT_EQ(m.n_layer, want[i].layers);
			uint32_t moe = 0;
			for (uint32_t l = 0; l < m.n_layer; l++)
				if (m.layers[l].n_expert) {
					moe++;
					ASSERT_EQ(m.layers[l].n_expert, want[i].experts);
				}
			ASSERT_EQ(moe, want[i].moe_layers);
			ASSERT_NEAR((double)info.n_params / 1e9, want[i].total,
			            want[i].total * 0.02);
			ASSERT_NEAR((double)info.n_params_active / 1e9, want[i].active,
			            want[i].active * 0.05);
			ASSERT_EQ(info.mbits_per_weight, q ? 8500u : 4850u);
			/* bytes = params x bits / 8, norms and router at F32 */
			bytes[q] = total_bytes(&m);
			ASSERT_NEAR((double)bytes[q],
			            (double)info.n_params * info.mbits_per_weight / 8000.0,
			            (double)bytes[q] * 0.01);
			ASSERT_FALSE(m.tied_head);
			ASSERT_GT(m.layers[0].kv_bytes_per_token, 0);
			shoal_spec_manifest_fini(&m);
		}
		ASSERT_NEAR((double)bytes[1] / (double)bytes[0], 8.5 / 4.85, 0.02);
	}
}

/* DeepSeek V3.1 (V3's shape) and Kimi K2 (384 experts, 64 heads, 1 dense
 * layer; published: 1 T total, 32 B active) at Q4_K_M, Q2_K and IQ4_XS. */
static void test_deepseek_kimi_specs(void)
{
	static const struct {
		const char *name;
		double total, active;
		uint32_t moe_layers, experts;
	} want[] = {{"deepseek-v3.1", 671, 37, 58, 256}, {"kimi-k2", 1000, 32, 60, 384}};
	static const struct {
		const char *file;
		uint32_t mbits;
	} quants[] = {{"q4_k_m", 4850}, {"q2_k", 2950}, {"iq4_xs", 4260}};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		uint64_t bytes[3];
		for (size_t q = 0; q < 3; q++) {
			char path[512], name[64], why[SHOAL_WHY_LEN];
			snprintf(name, sizeof name, "%s-%s", want[i].name, quants[q].file);
			spec_path(path, sizeof path, name);
			shoal_manifest m;
			shoal_spec_info info;
			ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
			ASSERT_EQ(m.n_layer, 61);
			uint32_t moe = 0;
			for (uint32_t l = 0; l < m.n_layer; l++)
				if (m.layers[l].n_expert) {
					moe++;
					ASSERT_EQ(m.layers[l].n_expert, want[i].experts);
					ASSERT_EQ(m.layers[l].n_expert_used, 8);
				}
			ASSERT_EQ(moe, want[i].moe_layers);
			ASSERT_NEAR((double)info.n_params / 1e9, want[i].total,
			            want[i].total * 0.05);
			ASSERT_NEAR((double)info.n_params_active / 1e9, want[i].active,
			            want[i].active * 0.08);
			ASSERT_EQ(info.mbits_per_weight, quants[q].mbits);
			/* MLA: the latent and the rope key per token and layer */
			ASSERT_U64_EQ(m.layers[60].kv_bytes_per_token, (512 + 64) * 2);
			bytes[q] = total_bytes(&m);
			shoal_spec_manifest_fini(&m);
		}
		ASSERT_NEAR((double)bytes[1] / (double)bytes[0], 2.95 / 4.85, 0.02);
		ASSERT_NEAR((double)bytes[2] / (double)bytes[0], 4.26 / 4.85, 0.02);
	}
}

/* What home clusters run at the end of 2026 (models/specs/README.md gives
 * each figure's source): gpt-oss-120b in ggml-org's MXFP4 file (116.83 B
 * parameters, 59.02 GiB; OpenAI's 5.13 B active count the unembedding
 * but not the embedding table, 0.58 B, which the spec's count holds), GLM-4.6 (355 B with its NextN
 * layer, which the spec leaves out; 32 B active) at Q4_K_M and Unsloth's
 * dynamic 2-bit mix (135 GB), DeepSeek V3.1 in Unsloth's UD-IQ1_S mix
 * (192 GB). */
static void test_home_models_specs(void)
{
	static const struct {
		const char *file;
		double total, active, gb; /* gb: the file's size, 0: not checked */
		uint32_t layers, moe_layers, experts, used, mbits;
	} want[] = {
	    {"gpt-oss-120b-mxfp4", 116.83, 5.13 + 0.58, 59.02 * 1.073741824, 36, 36, 128, 4, 4340},
	    {"glm-4.6-q4_k_m", 355, 32, 0, 92, 89, 160, 8, 4850},
	    {"glm-4.6-ud-iq2", 355, 32, 135, 92, 89, 160, 8, 3040},
	    {"deepseek-v3.1-ud-iq1_s", 671, 37, 192, 61, 58, 256, 8, 2290},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		char path[512], why[SHOAL_WHY_LEN];
		spec_path(path, sizeof path, want[i].file);
		shoal_manifest m;
		shoal_spec_info info;
		ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(m.n_layer, want[i].layers);
		uint32_t moe = 0;
		for (uint32_t l = 0; l < m.n_layer; l++)
			if (m.layers[l].n_expert) {
				moe++;
				ASSERT_EQ(m.layers[l].n_expert, want[i].experts);
				ASSERT_EQ(m.layers[l].n_expert_used, want[i].used);
			}
		ASSERT_EQ(moe, want[i].moe_layers);
		ASSERT_EQ(info.mbits_per_weight, want[i].mbits);
		ASSERT_NEAR((double)info.n_params / 1e9, want[i].total, want[i].total * 0.02);
		ASSERT_NEAR((double)info.n_params_active / 1e9, want[i].active,
		            want[i].active * 0.08);
		if (want[i].gb > 0)
			ASSERT_NEAR((double)total_bytes(&m) / 1e9, want[i].gb, want[i].gb * 0.03);
		shoal_spec_manifest_fini(&m);
	}
}

static void test_mla_kv_is_compressed(void)
{
	char path[512], why[SHOAL_WHY_LEN];
	spec_path(path, sizeof path, "deepseek-v3-q4_k_m");
	shoal_manifest m;
	ASSERT_EQ(shoal_spec_load(path, &m, NULL, why, sizeof why), SHOAL_OK);
	/* (kv_lora_rank 512 + rope 64) F16 values per token and layer */
	ASSERT_U64_EQ(m.layers[10].kv_bytes_per_token, (512 + 64) * 2);
	ASSERT_EQ(m.layers[2].n_expert, 0); /* first three layers dense */
	ASSERT_EQ(m.layers[3].n_expert_used, 8);
	shoal_spec_manifest_fini(&m);
}

/* DeepSeek V3's MTP layer (nextn_layers 1): one MoE layer of 256
 * experts, its projection and norms, ~12.3 GB (11.5 GiB) at Q8_0, its KV
 * a layer's; a spec without it has none; the count leaves it out. A
 * cluster's "speculate": "mtp" reaches the view and back. */
static void test_mtp_layer(void)
{
	char path[512], why[SHOAL_WHY_LEN];
	spec_path(path, sizeof path, "deepseek-v3-q8_0");
	shoal_manifest m;
	shoal_spec_info info;
	ASSERT_EQ(shoal_spec_load(path, &m, &info, why, sizeof why), SHOAL_OK);
	printf("  deepseek-v3-q8_0: MTP layer %.2f GB, %llu KV bytes a token\n",
	       (double)m.mtp_bytes / 1e9, (unsigned long long)m.mtp_kv_bytes_per_token);
	ASSERT_NEAR((double)m.mtp_bytes / 1e9, 12.34, 0.1);
	ASSERT_U64_EQ(m.mtp_kv_bytes_per_token, m.layers[60].kv_bytes_per_token);
	ASSERT_TRUE(m.mtp_shares_embd);
	ASSERT_NEAR((double)info.n_params / 1e9, 671, 671 * 0.02);
	shoal_spec_manifest_fini(&m);
	spec_path(path, sizeof path, "qwen3-30b-a3b-q4_k_m");
	ASSERT_EQ(shoal_spec_load(path, &m, NULL, why, sizeof why), SHOAL_OK);
	ASSERT_U64_EQ(m.mtp_bytes, 0);
	shoal_spec_manifest_fini(&m);
	const char *two = "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, "
	                  "\"ffn\": 128, \"quant\": \"F16\", \"nextn_layers\": 2}";
	ASSERT_EQ(shoal_spec_parse(two, strlen(two), &m, NULL, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "nextn_layers") != NULL);

	const char *cl = "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", "
	                 "\"memory\": \"1T\", \"bandwidth_gbs\": 800, \"compute_gflops\": 1000, "
	                 "\"speculate\": \"mtp\"}, {\"id\": \"000000000000000000000000000000a2\", "
	                 "\"memory\": \"1T\", \"bandwidth_gbs\": 800, \"compute_gflops\": 1000, "
	                 "\"speculate\": \"lookup\"}]}";
	shoal_view *v = NULL, *w = NULL;
	ASSERT_EQ(shoal_cluster_parse(cl, strlen(cl), &v, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_view_peer_at(v, 0)->mtp);
	ASSERT_FALSE(shoal_view_peer_at(v, 1)->mtp);
	json_t *o = shoal_cluster_to_json(v);
	char *text = json_dumps(o, 0);
	json_decref(o);
	ASSERT_EQ(shoal_cluster_parse(text, strlen(text), &w, why, sizeof why), SHOAL_OK);
	free(text);
	ASSERT_TRUE(shoal_view_peer_at(w, 0)->mtp);
	ASSERT_FALSE(shoal_view_peer_at(w, 1)->mtp);
	shoal_view_free(v);
	shoal_view_free(w);
	const char *bad = "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", "
	                  "\"memory\": \"1T\", \"bandwidth_gbs\": 8, \"compute_gflops\": 1, "
	                  "\"speculate\": \"nextn\"}]}";
	v = NULL;
	ASSERT_EQ(shoal_cluster_parse(bad, strlen(bad), &v, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "speculate") != NULL);
}

/* The plan's KV bytes over its peers. */
static uint64_t plan_kv(const shoal_plan *p)
{
	uint64_t kv = 0;
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		kv += shoal_plan_peer_at(p, i)->kv_bytes;
	return kv;
}

/* gpt-oss-120b's sliding layers (window 128, the even ones) keep rings of
 * 128 + SHOAL_MANIFEST_KV_RING_ROWS positions: the plan's KV at 8192
 * positions is 18 layers x 8192 + 18 x 160, not 36 x 8192. */
static void test_sliding_kv_is_its_window(void)
{
	char path[512], why[SHOAL_WHY_LEN];
	const char *src = getenv("SHOAL_SRCDIR");
	spec_path(path, sizeof path, "gpt-oss-120b-mxfp4");
	shoal_manifest m;
	ASSERT_EQ(shoal_spec_load(path, &m, NULL, why, sizeof why), SHOAL_OK);
	const uint64_t tok = 2 * 8 * 64 * SHOAL_MANIFEST_KV_ELT; /* K, V of 8 heads of 64 */
	for (uint32_t l = 0; l < m.n_layer; l++) {
		ASSERT_U64_EQ(m.layers[l].kv_bytes_per_token, tok);
		ASSERT_EQ(m.layers[l].kv_positions, l % 2 ? 0 : 128 + SHOAL_MANIFEST_KV_RING_ROWS);
	}
	snprintf(path, sizeof path, "%s/scheduler/examples/studio-and-minis.json", src ? src : ".");
	shoal_view *v = NULL;
	ASSERT_EQ(shoal_cluster_load(path, &v, why, sizeof why), SHOAL_OK);
	shoal_policy pol;
	shoal_policy_init(&pol);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	uint64_t ring = plan_kv(p);
	ASSERT_U64_EQ(ring, pol.sessions * tok * (18 * (uint64_t)pol.ctx + 18 * 160));
	shoal_plan_free(p);
	/* the same model counted by the context (the figure before rings) */
	for (uint32_t l = 0; l < m.n_layer; l++)
		m.layers[l].kv_positions = 0;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	printf("gpt-oss-120b at %u positions x %u session(s): KV %.1f MiB with rings, %.1f MiB "
	       "by the context\n",
	       pol.ctx, pol.sessions, ring / 1048576.0, plan_kv(p) / 1048576.0);
	ASSERT_U64_EQ(plan_kv(p), pol.sessions * tok * 36 * (uint64_t)pol.ctx);
	shoal_plan_free(p);
	shoal_view_free(v);
	shoal_spec_manifest_fini(&m);
}

static void test_bad_specs(void)
{
	static const char *bad[] = {
	    "[1, 2]",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100}", /* no quant */
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"Q9_X\"}",
	    "{\"layers\": -2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\"}",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\", "
	    "\"ffn\": 128, \"experts\": 4, \"experts_used\": 5, \"expert_ffn\": 32}",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\", "
	    "\"ffn\": 128, \"attention\": \"sliding\"}",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\", "
	    "\"ffn\": 128, \"attention\": \"mla\"}",
	    "{\"layers\": 2, \"dim\": \"64\", \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\"}",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, "
	    "\"bits_per_weight\": 0.1}",
	    "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\"}", /* dense,
	                   no
	                   ffn
	                 */
	    "{\"layers\": 99999, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"quant\": "
	    "\"F16\"}",
	    "{\"layers\": 2, \"dim\"",
	    /* every field in range, but the bytes (weights x millibits) would
	     * wrap 64 bits and come out small */
	    "{\"layers\": 1024, \"dim\": 1048576, \"heads\": 1048576, \"head_dim\": "
	    "1048576, \"ffn\": 1048576, \"vocab\": 100, \"quant\": \"F32\"}",
	    "{\"layers\": 1, \"dim\": 1048576, \"heads\": 1048576, \"head_dim\": 64, "
	    "\"ffn\": 1048576, \"vocab\": 100, \"quant\": \"F32\"}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		shoal_manifest m;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_spec_parse(bad[i], strlen(bad[i]), &m, NULL, why, sizeof why);
		if (!e)
			fprintf(stderr, "accepted: %s\n", bad[i]);
		ASSERT_NE(e, SHOAL_OK);
		ASSERT_GT(strlen(why), 5);
	}
	/* a custom bits-per-weight and a tied head */
	const char *ok = "{\"layers\": 2, \"dim\": 64, \"heads\": 4, \"vocab\": 100, \"ffn\": 128, "
	                 "\"bits_per_weight\": 3.5, \"tied_head\": true}";
	shoal_manifest m;
	shoal_spec_info info;
	ASSERT_EQ(shoal_spec_parse(ok, strlen(ok), &m, &info, NULL, 0), SHOAL_OK);
	ASSERT_EQ(info.mbits_per_weight, 3500);
	ASSERT_TRUE(m.tied_head);
	ASSERT_U64_EQ(m.head_bytes, 64 * 4 + m.embd_bytes);
	ASSERT_EQ(shoal_spec_quant_mbits("Q8_0"), 8500);
	ASSERT_EQ(shoal_spec_quant_mbits("nope"), 0);
	shoal_spec_manifest_fini(&m);
}

static void test_cluster_bytes(void)
{
	uint64_t b;
	ASSERT_EQ(shoal_cluster_parse_bytes("512G", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, 512ULL << 30);
	ASSERT_EQ(shoal_cluster_parse_bytes("64 GiB", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, 64ULL << 30);
	ASSERT_EQ(shoal_cluster_parse_bytes("16GB", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, 16000000000ULL);
	ASSERT_EQ(shoal_cluster_parse_bytes("1.5T", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, 3ULL << 39);
	ASSERT_EQ(shoal_cluster_parse_bytes("123", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, 123);
	ASSERT_NE(shoal_cluster_parse_bytes("12Q", &b), SHOAL_OK);
	ASSERT_NE(shoal_cluster_parse_bytes("G", &b), SHOAL_OK);
	ASSERT_NE(shoal_cluster_parse_bytes("-4G", &b), SHOAL_OK);
	ASSERT_NE(shoal_cluster_parse_bytes("99999999999T", &b), SHOAL_OK);
	/* fuzz_json: 2^63 was taken and written back as a negative JSON integer */
	ASSERT_NE(shoal_cluster_parse_bytes("9223372036854775808", &b), SHOAL_OK);
	ASSERT_EQ(shoal_cluster_parse_bytes("9223372036854774784", &b), SHOAL_OK);
	ASSERT_U64_EQ(b, UINT64_C(9223372036854774784));
}

static const char *cluster_ok =
    "{\"default_link\": {\"latency_us\": 50, \"bandwidth_gbit\": 10},"
    " \"peers\": ["
    "  {\"id\": \"000000000000000000000000000000b2\", \"name\": \"b\", \"memory\": \"64G\","
    "   \"bandwidth_gbs\": 273, \"compute_gflops\": 9000},"
    "  {\"id\": \"000000000000000000000000000000a1\", \"name\": \"a\", \"memory\": 1000000,"
    "   \"bandwidth_gbs\": 819.5, \"compute_gflops\": 28000, \"load_pct\": 20},"
    "  {\"id\": \"000000000000000000000000000000c3\", \"memory\": \"16G\","
    "   \"bandwidth_gbs\": 60, \"compute_gflops\": 400}],"
    " \"links\": [{\"a\": \"a\", \"b\": \"b\", \"latency_us\": 8, \"bandwidth_gbit\": 80},"
    "            {\"a\": \"000000000000000000000000000000b2\", \"b\": \"a\", \"latency_us\": 12}],"
    " \"routing\": [{\"layer\": 1, \"counts\": [5, 0, 7]}]}";

static void test_cluster_parse(void)
{
	shoal_view *v = NULL;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_cluster_parse(cluster_ok, strlen(cluster_ok), &v, why, sizeof why),
	          SHOAL_OK);
	ASSERT_EQ(shoal_view_n_peers(v), 3);
	const shoal_view_peer *a = shoal_view_peer_at(v, 0); /* id order */
	ASSERT_STR_EQ(a->name, "a");
	ASSERT_U64_EQ(a->mem_bytes, 1000000);
	ASSERT_U64_EQ(a->mem_bw, 819500000000ULL);
	ASSERT_EQ(a->load_pct, 20);
	ASSERT_STR_EQ(shoal_view_peer_at(v, 2)->name, "000000000000000000000000000000c3");
	uint64_t lat, bw;
	shoal_view_link(v, 0, 1, &lat, &bw); /* given twice: the worse of each */
	ASSERT_U64_EQ(lat, 12000);
	ASSERT_U64_EQ(bw, 1250000000ULL); /* 10 Gbit/s: the second entry's default */
	shoal_view_link(v, 1, 2, &lat, &bw);
	ASSERT_U64_EQ(lat, 50000);
	bool known;
	ASSERT_U64_EQ(shoal_view_expert_count(v, 1, 2, &known), 7);
	ASSERT_TRUE(known);
	shoal_view_expert_count(v, 0, 0, &known);
	ASSERT_FALSE(known);
	shoal_view_free(v);

	static const char *bad[] = {
	    "{}",
	    "{\"peers\": []}",
	    "{\"peers\": [{\"id\": \"xyz\", \"memory\": 1, \"bandwidth_gbs\": 1, "
	    "\"compute_gflops\": 1}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"bandwidth_gbs\": 1, "
	    "\"compute_gflops\": 1}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"compute_gflops\": 1}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"bandwidth_gbs\": 0, \"compute_gflops\": 1}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"bandwidth_gbs\": 1, \"compute_gflops\": 1}], \"links\": [{\"a\": \"nobody\", \"b\": "
	    "\"000000000000000000000000000000a1\"}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"bandwidth_gbs\": 1, \"compute_gflops\": 1}, {\"id\": "
	    "\"000000000000000000000000000000a1\", \"memory\": \"1G\", \"bandwidth_gbs\": 1, "
	    "\"compute_gflops\": 1}]}",
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"bandwidth_gbs\": 1, \"compute_gflops\": 1}], \"routing\": [{\"layer\": 0, "
	    "\"counts\": [-1]}]}",
	    /* a layer past 32 bits is out of range, not layer 0 */
	    "{\"peers\": [{\"id\": \"000000000000000000000000000000a1\", \"memory\": \"1G\", "
	    "\"bandwidth_gbs\": 1, \"compute_gflops\": 1}], \"routing\": [{\"layer\": "
	    "4294967296, \"counts\": [5]}]}",
	    "not json",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		v = NULL;
		why[0] = 0;
		shoal_err e = shoal_cluster_parse(bad[i], strlen(bad[i]), &v, why, sizeof why);
		if (!e)
			fprintf(stderr, "accepted: %s\n", bad[i]);
		ASSERT_NE(e, SHOAL_OK);
		ASSERT_TRUE(v == NULL);
		ASSERT_GT(strlen(why), 5);
	}
}

static void test_plan_json(void)
{
	char path[512], why[SHOAL_WHY_LEN];
	const char *src = getenv("SHOAL_SRCDIR");
	snprintf(path, sizeof path, "%s/scheduler/examples/studio-and-minis.json", src ? src : ".");
	shoal_view *v = NULL;
	ASSERT_EQ(shoal_cluster_load(path, &v, why, sizeof why), SHOAL_OK);
	spec_path(path, sizeof path, "qwen3-235b-a22b-q8_0");
	shoal_manifest m;
	ASSERT_EQ(shoal_spec_load(path, &m, NULL, why, sizeof why), SHOAL_OK);
	shoal_policy pol;
	shoal_policy_init(&pol);
	shoal_plan *p = NULL;
	ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why), SHOAL_OK);
	json_t *o = shoal_plan_to_json(p);
	ASSERT_TRUE(o != NULL);
	char hex[65];
	shoal_digest_hex(shoal_plan_digest(p), hex);
	ASSERT_STR_EQ(json_string_value(json_object_get(o, "digest")), hex);
	ASSERT_EQ(json_integer_value(json_object_get(o, "epoch")), 1);
	ASSERT_NEAR(json_real_value(json_object_get(o, "predicted_ms_per_token")),
	            shoal_plan_predicted_ns(p) / 1e6, 1e-9);
	json_t *st = json_object_get(o, "stages");
	ASSERT_EQ(json_array_size(st), shoal_plan_n_stages(p));
	ASSERT_EQ(json_integer_value(json_object_get(json_array_get(st, 0), "first_layer")), 0);
	ASSERT_EQ(json_integer_value(
	              json_object_get(json_array_get(st, json_array_size(st) - 1), "end_layer")),
	          94);
	ASSERT_EQ(strlen(json_string_value(json_object_get(json_array_get(st, 0), "peer"))), 32);
	/* every expert of every layer appears, once per owner */
	json_t *ex = json_object_get(o, "experts");
	ASSERT_EQ(json_array_size(ex), 94);
	size_t n_listed = 0;
	size_t i, j;
	json_t *layer, *own;
	json_array_foreach(ex, i, layer)
	{
		json_array_foreach(json_object_get(layer, "owners"), j, own) n_listed +=
		    json_array_size(json_object_get(own, "experts"));
	}
	ASSERT_GE(n_listed, 94 * 128);
	json_t *mem = json_object_get(o, "memory");
	ASSERT_EQ(json_array_size(mem), shoal_plan_n_peers(p));
	json_array_foreach(mem, i, own)
	{
		ASSERT_LE(json_integer_value(json_object_get(own, "used_bytes")),
		          json_integer_value(json_object_get(own, "capacity_bytes")));
	}
	/* stable: the same plan gives the same text */
	char *t1 = json_dumps(o, JSON_COMPACT);
	json_t *o2 = shoal_plan_to_json(p);
	char *t2 = json_dumps(o2, JSON_COMPACT);
	ASSERT_STR_EQ(t1, t2);
	free(t1);
	free(t2);
	json_decref(o);
	json_decref(o2);
	shoal_plan_free(p);
	shoal_spec_manifest_fini(&m);
	shoal_view_free(v);
}

/* Mutated cluster files and specs: refused with a reason or planned,
 * never a crash (run under valgrind/ASan to see the difference). */
static void test_mutations(void)
{
	static const char *spec =
	    "{\"layers\": 6, \"dim\": 256, \"heads\": 8, \"kv_heads\": 2, \"vocab\": 1000, "
	    "\"ffn\": 512, \"experts\": 8, \"experts_used\": 2, \"expert_ffn\": 128, "
	    "\"dense_first_layers\": 1, \"quant\": \"Q8_0\"}";
	uint64_t x = 12345;
	size_t lc = strlen(cluster_ok), ls = strlen(spec);
	char *buf = malloc(lc + 1), *sb = malloc(ls + 1);
	int planned = 0, refused = 0;
	shoal_policy pol;
	shoal_policy_init(&pol);
	pol.ctx = 64;
	for (int it = 0; it < 3000; it++) {
		memcpy(buf, cluster_ok, lc + 1);
		memcpy(sb, spec, ls + 1);
		for (int k = 0; k < 1 + it % 3; k++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			size_t at = (size_t)(x >> 33) % lc;
			static const char alphabet[] = "0123456789-.:,{}[]\"eE aGT";
			if (it % 2) /* one of the two files per round */
				buf[at] = alphabet[(x >> 20) % (sizeof alphabet - 1)];
			else
				sb[(x >> 40) % ls] = alphabet[(x >> 12) % (sizeof alphabet - 1)];
		}
		shoal_view *v = NULL;
		shoal_manifest m;
		char why[SHOAL_WHY_LEN];
		shoal_err e1 = shoal_cluster_parse(buf, lc, &v, why, sizeof why);
		shoal_err e2 = shoal_spec_parse(sb, ls, &m, NULL, why, sizeof why);
		if (!e1 && !e2) {
			shoal_plan *p = NULL;
			if (shoal_schedule(v, &m, &pol, NULL, &p, why, sizeof why) == SHOAL_OK)
				planned++;
			else
				refused++;
			shoal_plan_free(p);
		} else {
			refused++;
		}
		if (!e2)
			shoal_spec_manifest_fini(&m);
		shoal_view_free(v);
	}
	free(buf);
	free(sb);
	printf("  %d planned, %d refused\n", planned, refused);
	ASSERT_GT(planned, 100);
	ASSERT_GT(refused, 100);
}

/* view -> JSON -> view plans the same, for every example cluster */
static void test_cluster_round_trip(void)
{
	static const char *names[] = {"mac-studio-x4", "studio-and-minis", "linux-homelab"};
	const char *src = getenv("SHOAL_SRCDIR");
	char path[512], why[SHOAL_WHY_LEN];
	spec_path(path, sizeof path, "qwen3-30b-a3b-q4_k_m");
	shoal_manifest m;
	ASSERT_EQ(shoal_spec_load(path, &m, NULL, why, sizeof why), SHOAL_OK);
	shoal_policy pol;
	shoal_policy_init(&pol);
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/scheduler/examples/%s.json", src ? src : ".",
		         names[i]);
		shoal_view *v = NULL, *w = NULL;
		ASSERT_EQ(shoal_cluster_load(path, &v, why, sizeof why), SHOAL_OK);
		/* routing counts travel too */
		for (uint32_t e = 0; e < 128; e++)
			shoal_view_set_expert_count(v, 5, e, e * 7 % 13);
		json_t *o = shoal_cluster_to_json(v);
		ASSERT_TRUE(o != NULL);
		char *text = json_dumps(o, 0);
		json_decref(o);
		ASSERT_EQ(shoal_cluster_parse(text, strlen(text), &w, why, sizeof why), SHOAL_OK);
		free(text);
		ASSERT_EQ(shoal_view_n_peers(w), shoal_view_n_peers(v));
		ASSERT_EQ(shoal_view_n_links(w), shoal_view_n_links(v));
		for (size_t p = 0; p < shoal_view_n_peers(v); p++) {
			ASSERT_U64_EQ(shoal_view_peer_at(w, p)->mem_bw,
			              shoal_view_peer_at(v, p)->mem_bw);
			ASSERT_U64_EQ(shoal_view_peer_at(w, p)->mem_bytes,
			              shoal_view_peer_at(v, p)->mem_bytes);
		}
		shoal_plan *a = NULL, *b = NULL;
		ASSERT_EQ(shoal_schedule(v, &m, &pol, NULL, &a, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_schedule(w, &m, &pol, NULL, &b, why, sizeof why), SHOAL_OK);
		ASSERT_MEM_EQ(shoal_plan_digest(a), shoal_plan_digest(b), SHOAL_DIGEST_BYTES);
		ASSERT_U64_EQ(shoal_plan_predicted_ns(a), shoal_plan_predicted_ns(b));
		shoal_plan_free(a);
		shoal_plan_free(b);
		shoal_view_free(v);
		shoal_view_free(w);
	}
	shoal_spec_manifest_fini(&m);
}

TEST_MAIN(TEST_CASE(test_shipped_specs), TEST_CASE(test_deepseek_kimi_specs),
          TEST_CASE(test_home_models_specs), TEST_CASE(test_mla_kv_is_compressed),
          TEST_CASE(test_sliding_kv_is_its_window), TEST_CASE(test_bad_specs),
          TEST_CASE(test_cluster_bytes), TEST_CASE(test_cluster_parse),
          TEST_CASE(test_cluster_round_trip), TEST_CASE(test_mutations), TEST_CASE(test_plan_json),
          TEST_CASE(test_mtp_layer))
