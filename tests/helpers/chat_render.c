/*
 * tests/helpers/chat_render.c: a helper for tests/sh/chat_jinja.sh, not a test itself.
 *
 * Part: tests of models/ (chat). Reads a JSON array of cases
 * {"style": name, "gen": bool, "thinking": -1|0|1 (optional),
 * "msgs": [{"role", "content"}...]} from the
 * file argv[1] and writes to argv[2] a JSON array with, per case,
 * {"out": rendering} or {"err": reason} from shoal_chat_render, so that a
 * script can compare them with Jinja2's rendering of the real templates.
 */
#include "models/chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* Messages per case: the script makes at most 8. */
#define CASE_MAX_MSGS 64

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: chat_render CASES.json RESULTS.json\n");
		return 2;
	}
	json_error_t je;
	json_t *root = json_load_file(argv[1], 0, &je);
	if (!root || !json_is_array(root)) {
		fprintf(stderr, "chat_render: %s: %s\n", argv[1], root ? "not an array" : je.text);
		return 1;
	}
	json_t *res = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(root, i, c)
	{
		shoal_chat_style st;
		const char *name = json_string_value(json_object_get(c, "style"));
		json_t *ms = json_object_get(c, "msgs");
		size_t n = json_array_size(ms);
		if (!name || shoal_chat_style_from_name(name, &st) || n > CASE_MAX_MSGS) {
			fprintf(stderr, "chat_render: case %zu: bad style or too many messages\n",
			        i);
			return 1;
		}
		shoal_chat_msg m[CASE_MAX_MSGS];
		for (size_t k = 0; k < n; k++) {
			json_t *x = json_array_get(ms, k);
			m[k].role = json_string_value(json_object_get(x, "role"));
			m[k].content = json_string_value(json_object_get(x, "content"));
		}
		json_t *th = json_object_get(c, "thinking");
		shoal_chat_opts o = {
		    .add_generation_prompt = json_is_true(json_object_get(c, "gen")),
		    .bos = "<BOS>",
		    .eos = "<EOS>",
		    .thinking = th ? (int)json_integer_value(th) : -1,
		};
		char *out = NULL, why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_chat_render_opts(st, m, n, &o, &out, why, sizeof why);
		json_array_append_new(res, e ? json_pack("{s:s}", "err", why)
		                             : json_pack("{s:s}", "out", out));
		free(out);
	}
	int rc = json_dump_file(res, argv[2], 0) ? 1 : 0;
	json_decref(res);
	json_decref(root);
	return rc;
}
