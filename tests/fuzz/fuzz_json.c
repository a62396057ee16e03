/*
 * tests/fuzz/fuzz_json.c: libFuzzer target for the JSON readers a user
 * hands files to: the cluster view (runtime/node/plan_json.c
 * shoal_cluster_parse, `shoal plan --cluster`) and the model spec
 * (models/spec.c shoal_spec_parse). The first byte picks the reader; the
 * rest is the text. Bad input gives an error with a reason; a view read
 * writes back as cluster JSON that reads again to the same peers and links.
 *
 *   make fuzz-build && tests/fuzz/fuzz_json -max_total_time=60 CORPUS
 * Seeds: tests/fuzz/corpus_json (each file starts with its selector byte).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "models/spec.h"
#include "runtime/node/plan_json.h"
#include "scheduler/view.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	shoal_log_set_level(SHOAL_LOG_ERROR);
	return 0;
}

static void cluster(const char *text, size_t len)
{
	shoal_view *v, *v2;
	char why[SHOAL_WHY_LEN];
	why[0] = 0;
	if (shoal_cluster_parse(text, len, &v, why, sizeof why)) {
		if (!why[0])
			abort();
		return;
	}
	json_t *j = shoal_cluster_to_json(v);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (!s)
		abort();
	if (shoal_cluster_parse(s, strlen(s), &v2, why, sizeof why)) {
		fprintf(stderr, "written back view refused: %s\n%s\n", why, s);
		abort();
	}
	if (shoal_view_n_peers(v2) != shoal_view_n_peers(v) ||
	    shoal_view_n_links(v2) != shoal_view_n_links(v))
		abort();
	free(s);
	json_decref(j);
	shoal_view_free(v2);
	shoal_view_free(v);
}

static void spec(const char *text, size_t len)
{
	shoal_manifest m;
	shoal_spec_info info;
	char why[SHOAL_WHY_LEN];
	why[0] = 0;
	if (shoal_spec_parse(text, len, &m, &info, why, sizeof why)) {
		if (!why[0])
			abort();
		return;
	}
	shoal_spec_manifest_fini(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (data[0] & 1)
		spec((const char *)data + 1, size - 1);
	else
		cluster((const char *)data + 1, size - 1);
	return 0;
}
