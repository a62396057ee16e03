/*
 * tests/helpers/chat_render.c: a helper for tests/sh/chat_jinja.sh, not a test itself.
 *
 * Part: tests of models/ (chat). Reads a JSON array of cases
 * {"style": name, "gen": bool, "thinking": -1|0|1 (optional),
 * "date": "YYYY-MM-DD" (optional),
 * "tools": [...] (optional), "msgs": [{"role", "content", "tool_calls":
 * [{"id", "function": {"name", "arguments": string}}] (optional),
 * "tool_call_id" (optional)}...]} from the
 * file argv[1] and writes to argv[2] a JSON array with, per case,
 * {"out": rendering} or {"err": reason} from shoal_chat_render, so that a
 * script can compare them with Jinja2's rendering of the real templates.
 */
#include "models/chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* Messages per case: the scripts make at most 12; calls per message 4. */
#define CASE_MAX_MSGS  64
#define CASE_MAX_CALLS 8

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
		shoal_chat_call calls[CASE_MAX_MSGS][CASE_MAX_CALLS];
		for (size_t k = 0; k < n; k++) {
			json_t *x = json_array_get(ms, k), *tc = json_object_get(x, "tool_calls");
			m[k] = (shoal_chat_msg){
			    .role = json_string_value(json_object_get(x, "role")),
			    .content = json_string_value(json_object_get(x, "content")),
			    .tool_call_id = json_string_value(json_object_get(x, "tool_call_id")),
			    .calls = calls[k],
			    .n_calls =
			        json_array_size(tc) < CASE_MAX_CALLS ? json_array_size(tc) : 0};
			for (size_t j = 0; j < m[k].n_calls; j++) {
				json_t *cj = json_array_get(tc, j),
				       *f = json_object_get(cj, "function");
				calls[k][j] = (shoal_chat_call){
				    json_string_value(json_object_get(cj, "id")),
				    json_string_value(json_object_get(f, "name")),
				    json_string_value(json_object_get(f, "arguments"))};
			}
		}
		json_t *tools = json_object_get(c, "tools");
		char *tools_s =
		    tools ? json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		json_t *th = json_object_get(c, "thinking");
		shoal_chat_opts o = {
		    .add_generation_prompt = json_is_true(json_object_get(c, "gen")),
		    .bos = "<BOS>",
		    .eos = "<EOS>",
		    .thinking = th ? (int)json_integer_value(th) : -1,
		    .tools = tools_s,
		    .date = json_string_value(json_object_get(c, "date")),
		};
		char *out = NULL, why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_chat_render_opts(st, m, n, &o, &out, why, sizeof why);
		json_array_append_new(res, e ? json_pack("{s:s}", "err", why)
		                             : json_pack("{s:s}", "out", out));
		free(out);
		free(tools_s);
	}
	int rc = json_dump_file(res, argv[2], 0) ? 1 : 0;
	json_decref(res);
	json_decref(root);
	return rc;
}
