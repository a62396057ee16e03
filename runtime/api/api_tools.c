/*
 * runtime/api/api_tools.c: function calls in the API's replies
 * (api_impl.h): the model's text parsed by models/tool_call.c into
 * OpenAI's tool_calls, whole or as stream deltas, and the checks of
 * tool_choice.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void call_id(const shoal_tool_parsed *p, size_t i, const char *base, char *id, size_t cap)
{
	if (p->calls[i].id && p->calls[i].id[0])
		snprintf(id, cap, "%s", p->calls[i].id);
	else
		snprintf(id, cap, "call_%s_%zu", base, i);
}

json_t *api__tool_calls_json(const shoal_tool_parsed *p, size_t n, const char *base)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n && i < p->n_calls; i++) {
		char id[96];
		call_id(p, i, base, id, sizeof id);
		json_array_append_new(a, json_pack("{ss ss s{ss ss}}", "id", id, "type", "function",
		                                   "function", "name", p->calls[i].name,
		                                   "arguments", p->calls[i].arguments));
	}
	return a;
}

json_t *api__tool_deltas(const shoal_tool_parsed *p, size_t n, const char *base)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n && i < p->n_calls; i++) {
		char id[96];
		call_id(p, i, base, id, sizeof id);
		json_array_append_new(a, json_pack("{s[{sI ss ss s{ss ss}}]}", "tool_calls",
		                                   "index", (json_int_t)i, "id", id, "type",
		                                   "function", "function", "name", p->calls[i].name,
		                                   "arguments", ""));
		const char *s = p->calls[i].arguments;
		for (size_t off = 0, len = strlen(s); off < len;) {
			/* a piece ends on a character boundary: each is valid UTF-8 */
			size_t e = off + API_ARGS_PIECE < len ? off + API_ARGS_PIECE : len;
			while (e < len && ((unsigned char)s[e] & 0xc0) == 0x80)
				e++;
			json_array_append_new(a, json_pack("{s[{sI s{ss%}}]}", "tool_calls",
			                                   "index", (json_int_t)i, "function",
			                                   "arguments", s + off, e - off));
			off = e;
		}
	}
	return a;
}

size_t api__tool_count(const shoal_api_req *q, const shoal_tool_parsed *p)
{
	if (p->state != SHOAL_TOOL_DONE || q->tool_choice == SHOAL_API_TOOL_NONE)
		return 0;
	return !q->parallel && p->n_calls > 1 ? 1 : p->n_calls;
}

bool api__tool_choice_met(const shoal_api_req *q, const shoal_tool_parsed *p, char *why,
                          size_t why_len)
{
	if (q->tool_choice != SHOAL_API_TOOL_REQUIRED && q->tool_choice != SHOAL_API_TOOL_NAMED)
		return true;
	const char *st = p->state == SHOAL_TOOL_PARTIAL ? "a call cut short"
	                 : p->state == SHOAL_TOOL_BAD   ? "a malformed call"
	                                                : "no call";
	if (!api__tool_count(q, p)) {
		snprintf(
		    why, why_len,
		    "tool_choice asks for a function call but the model's reply holds %s%s%s%s", st,
		    p->state == SHOAL_TOOL_BAD ? ": " : "",
		    p->state == SHOAL_TOOL_BAD ? p->why : "",
		    p->state == SHOAL_TOOL_PARTIAL ? " (max_tokens ran out: raise it)" : "");
		return false;
	}
	for (size_t i = 0; q->tool_choice == SHOAL_API_TOOL_NAMED && i < api__tool_count(q, p); i++)
		if (strcmp(p->calls[i].name, q->tool_name)) {
			snprintf(why, why_len,
			         "tool_choice asks for '%s' but the model called '%.64s'",
			         q->tool_name, p->calls[i].name);
			return false;
		}
	return true;
}

const char *api__test_reply(const shoal_api_req *q)
{
#ifdef SHOAL_TEST_HOOKS
	const char *t = getenv("SHOAL_TEST_REPLY"); /* any chat reply */
	if (t && t[0] && q->chat)
		return t;
	t = getenv("SHOAL_TEST_TOOL_REPLY");
	if (!t || !t[0] || !q->chat || !q->tools || q->tool_choice == SHOAL_API_TOOL_NONE ||
	    !q->n_msgs || !strcmp(q->msgs[q->n_msgs - 1].role, "tool"))
		return NULL;
	return t;
#else
	(void)q;
	return NULL;
#endif
}
