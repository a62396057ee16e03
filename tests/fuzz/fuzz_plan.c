/*
 * tests/fuzz/fuzz_plan.c: libFuzzer target for the plan decoder
 * (scheduler/plan.c shoal_plan_decode), which reads a plan a peer kept in
 * its state directory. Any bytes decode or give SHOAL_ERR_FORMAT with a
 * reason; a decoded plan is checked, so it encodes again, byte for byte
 * (the encoding is canonical: trailing bytes are refused).
 *
 *   make fuzz-build && tests/fuzz/fuzz_plan -max_total_time=60 CORPUS
 * Seeds: plans the scheduler makes for the example clusters and specs,
 * without and with tensor groups, and with a peer that drafts with
 * DeepSeek's MTP layer (version 3)
 * (SHOAL_FUZZ_SEEDS=DIR FUZZ_SRCDIR=. tests/fuzz/fuzz_plan -runs=0).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "models/spec.h"
#include "runtime/node/plan_json.h"
#include "scheduler/plan.h"
#include "tests/fuzz/fuzz_seed.h"

static void seeds(const char *src)
{
	static const char *const views[] = {"linux-homelab", "mac-studio-x4", "studio-and-minis"};
	static const char *const specs[] = {"qwen3-30b-a3b-q4_k_m", "llama-3.1-70b-q4_k_m",
	                                    "deepseek-v3-q4_k_m"};
	char path[512];
	for (size_t i = 0; i < 3; i++) {
		shoal_view *v, *vm;
		snprintf(path, sizeof path, "%s/scheduler/examples/%s.json", src, views[i]);
		if (shoal_cluster_load(path, &v, NULL, 0))
			abort();
		/* the same cluster, its first peer with "speculate": "mtp" */
		json_t *o = shoal_cluster_to_json(v);
		char *text = NULL;
		if (!o ||
		    json_object_set_new(json_array_get(json_object_get(o, "peers"), 0), "speculate",
		                        json_string("mtp")) ||
		    !(text = json_dumps(o, 0)) ||
		    shoal_cluster_parse(text, strlen(text), &vm, NULL, 0))
			abort();
		free(text);
		json_decref(o);
		for (size_t j = 0; j < 3; j++) {
			shoal_manifest m;
			shoal_policy pol;
			shoal_plan *p;
			uint8_t *enc;
			size_t len;
			snprintf(path, sizeof path, "%s/models/specs/%s.json", src, specs[j]);
			if (shoal_spec_load(path, &m, NULL, NULL, 0))
				abort();
			/* the plain plan, then one with tensor groups preferred
			 * (a group section to decode), then the plain one where
			 * the first peer drafts with the MTP layer (the
			 * deepseek spec: version 3) */
			for (int tp = 0; tp < 3; tp++) {
				shoal_policy_init(&pol);
				pol.tensor_groups = pol.tensor_prefer = tp == 1;
				if (shoal_schedule(tp == 2 ? vm : v, &m, &pol, NULL, &p, NULL, 0))
					continue;
				if (tp == 2 && !shoal_plan_mtp(p)) {
					shoal_plan_free(p);
					continue;
				}
				if (tp == 1 && !shoal_plan_n_groups(p)) {
					shoal_plan_free(p);
					continue;
				}
				if (shoal_plan_encode(p, &enc, &len))
					abort();
				fuzz_seed("plan", enc, len);
				free(enc);
				shoal_plan_free(p);
			}
			shoal_spec_manifest_fini(&m);
		}
		shoal_view_free(v);
		shoal_view_free(vm);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shoal_log_set_level(SHOAL_LOG_ERROR);
	if (getenv("SHOAL_FUZZ_SEEDS"))
		seeds(getenv("FUZZ_SRCDIR") ? getenv("FUZZ_SRCDIR") : ".");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	shoal_plan *p;
	char why[SHOAL_WHY_LEN];
	why[0] = 0;
	shoal_err e = shoal_plan_decode(data, size, &p, why, sizeof why);
	if (e) {
		if (e != SHOAL_ERR_FORMAT || !why[0])
			abort();
		return 0;
	}
	uint8_t *enc;
	size_t len;
	if (shoal_plan_encode(p, &enc, &len) || len != size || memcmp(enc, data, size))
		abort();
	free(enc);
	shoal_plan_free(p);
	return 0;
}
