/*
 * tests/fuzz/fuzz_tool_call.c: libFuzzer target for the tool-call parsers
 * (models/tool_call.c): any bytes as a model's reply, in each tool syntax,
 * must give a state, content and checked calls, never a crash or a leak.
 * The first byte picks the syntax. Invariants: DONE has 1 to
 * SHOAL_TOOL_MAX_CALLS calls, each with a name and arguments that are a
 * JSON object; other states have none and keep the whole text as content;
 * the hold offset is within the text, and a text held from 0 up to the hold
 * never parses as calls (nothing the stream already showed was a call).
 * The same bytes are also read as a reply's reasoning and answer
 * (models/reply.c) in each form: the parts of any prefix read while it
 * streams are prefixes of the parts of the whole reply.
 *
 *   make fuzz                      (builds every target with clang, runs each)
 *   tests/fuzz/fuzz_tool_call -max_total_time=60 [CORPUS]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "models/reply.h"
#include "models/tool_call.h"

static bool is_prefix(const char *a, size_t na, const char *b, size_t nb)
{
	return na <= nb && !memcmp(a, b, na);
}

static void reply_check(const uint8_t *data, size_t size)
{
	shoal_reply_form f = (shoal_reply_form)(data[0] % 3);
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	shoal_reply w, q;
	if (shoal_reply_split(f, text, len, true, &w))
		return;
	for (size_t cut = 0; cut <= len; cut += 1 + len / 16) {
		if (shoal_reply_split(f, text, cut, false, &q))
			break;
		if (q.settled > cut ||
		    !is_prefix(q.reasoning, q.n_reasoning, w.reasoning, w.n_reasoning) ||
		    !is_prefix(q.content, q.n_content, w.content, w.n_content))
			abort();
		shoal_reply_fini(&q);
	}
	if (w.settled > len || w.content[w.n_content] || w.reasoning[w.n_reasoning])
		abort();
	shoal_reply_fini(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size)
		reply_check(data, size);
	if (!size)
		return 0;
	shoal_chat_tools syn = (shoal_chat_tools)(data[0] % 7);
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	shoal_tool_parsed p;
	if (shoal_tool_parse(syn, text, len, &p))
		return 0; /* out of memory */
	if (!p.content)
		abort();
	if (p.state == SHOAL_TOOL_DONE) {
		if (!p.n_calls || p.n_calls > SHOAL_TOOL_MAX_CALLS)
			abort();
		for (size_t i = 0; i < p.n_calls; i++) {
			json_t *a = json_loads(p.calls[i].arguments, 0, NULL);
			if (!p.calls[i].name[0] || !json_is_object(a))
				abort();
			json_decref(a);
		}
	} else if (p.n_calls || strlen(p.content) > len ||
	           memcmp(p.content, text, strlen(p.content))) {
		abort();
	}
	if (syn == SHOAL_CHAT_TOOLS_NONE && p.state != SHOAL_TOOL_NONE)
		abort();
	size_t h = shoal_tool_hold(syn, text, len);
	if (h > len)
		abort();
	shoal_tool_parsed q;
	if (!shoal_tool_parse(syn, text, h, &q)) {
		if (q.state != SHOAL_TOOL_NONE)
			abort();
		shoal_tool_parsed_fini(&q);
	}
	shoal_tool_parsed_fini(&p);
	return 0;
}
