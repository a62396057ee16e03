/*
 * models/chat_tools.c: conversations with function calling, in the chat
 * formats whose templates define a tool syntax (models/chat.h).
 *
 * Part: models/. Each renderer mirrors, branch by branch, what its
 * family's template prints when `tools` is given or the history holds an
 * assistant message with tool_calls or a "tool" message, the tools and a
 * call's arguments printed by the templates' `tojson` as transformers
 * defines it (json.dumps, ensure_ascii off: models/chat_json.c). The
 * references are Jinja2 renderings of the real templates
 * (tests/sh/chat_tools_jinja.sh). Llama 3.1, Mistral Nemo and DeepSeek
 * V3.1 are in models/chat_tools_fmt.c.
 *
 * Divisions: the conversation's check; Qwen 2.5 and Qwen 3 (Hermes); the
 * entry point.
 */
#include "models/chat_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ------------------------------------------------------------ conversation */

static bool role_is(const chat_tc *c, size_t i, const char *r)
{
	return i < c->n && !strcmp(c->m[i].role, r);
}

static const char *const hermes_intro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char *const hermes_outro =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

/* The tool list of both Qwen templates: "\n" + tojson per tool. */
static void hermes_tools(const chat_tc *c, chat_out *b)
{
	chat__puts(b, hermes_intro);
	for (size_t i = 0; i < json_array_size(c->tools); i++) {
		char *t = chat__tojson_value(json_array_get(c->tools, i), 0);
		if (!t) {
			b->oom = true;
			return;
		}
		chat__puts(b, "\n");
		chat__puts(b, t);
		free(t);
	}
	chat__puts(b, hermes_outro);
}

static void hermes_call(const chat_tc *c, chat_out *b, size_t i, size_t j)
{
	chat__puts(b, "<tool_call>\n{\"name\": \"");
	chat__puts(b, c->m[i].calls[j].name);
	chat__puts(b, "\", \"arguments\": ");
	chat__puts(b, c->args[c->first[i] + j]);
	chat__puts(b, "}\n</tool_call>");
}

/* Both templates: consecutive tool messages share one user turn. */
static void hermes_tool_msg(const chat_tc *c, chat_out *b, size_t i)
{
	if (i == 0 || !role_is(c, i - 1, "tool"))
		chat__puts(b, "<|im_start|>user");
	chat__puts(b, "\n<tool_response>\n");
	chat__puts(b, c->m[i].content);
	chat__puts(b, "\n</tool_response>");
	if (i + 1 == c->n || !role_is(c, i + 1, "tool"))
		chat__puts(b, "<|im_end|>\n");
}

static void chatml(chat_out *b, const char *role, const char *text)
{
	chat__puts(b, "<|im_start|>");
	chat__puts(b, role);
	chat__puts(b, "\n");
	chat__puts(b, text);
	chat__puts(b, "<|im_end|>\n");
}

static void render_qwen25(const chat_tc *c, chat_out *b, bool gen)
{
	static const char *const dflt =
	    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
	bool sys0 = role_is(c, 0, "system");
	if (c->tools) {
		chat__puts(b, "<|im_start|>system\n");
		chat__puts(b, sys0 ? c->m[0].content : dflt);
		chat__puts(b, "\n\n");
		hermes_tools(c, b);
	} else {
		chatml(b, "system", sys0 ? c->m[0].content : dflt);
	}
	for (size_t i = 0; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (role_is(c, i, "user") || (role_is(c, i, "system") && i > 0) ||
		    (role_is(c, i, "assistant") && !m->n_calls)) {
			chatml(b, m->role, m->content);
		} else if (role_is(c, i, "assistant")) {
			chat__puts(b, "<|im_start|>assistant");
			if (m->content[0]) {
				chat__puts(b, "\n");
				chat__puts(b, m->content);
			}
			for (size_t j = 0; j < m->n_calls; j++) {
				chat__puts(b, "\n");
				hermes_call(c, b, i, j);
			}
			chat__puts(b, "<|im_end|>\n");
		} else if (role_is(c, i, "tool")) {
			hermes_tool_msg(c, b, i);
		}
	}
	if (gen)
		chat__puts(b, "<|im_start|>assistant\n");
}

/* Python's str.strip('\n') family on a slice. */
static void strip_nl(const char **p, size_t *n, bool left, bool right)
{
	while (left && *n && **p == '\n')
		(*p)++, (*n)--;
	while (right && *n && (*p)[*n - 1] == '\n')
		(*n)--;
}

static const char *find_last(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
		if (!memcmp(s + i, needle, k))
			return s + i;
	return NULL;
}

static void render_qwen3(const chat_tc *c, chat_out *b, bool gen, bool thinking)
{
	bool sys0 = role_is(c, 0, "system");
	if (c->tools) {
		chat__puts(b, "<|im_start|>system\n");
		if (sys0) {
			chat__puts(b, c->m[0].content);
			chat__puts(b, "\n\n");
		}
		hermes_tools(c, b);
	} else if (sys0) {
		chatml(b, "system", c->m[0].content);
	}
	/* the last user query that is not a wrapped tool response */
	size_t last_query = c->n - 1;
	for (size_t i = c->n; i-- > 0;) {
		const char *t = c->m[i].content;
		size_t tn = strlen(t);
		bool wrapped = tn >= 15 && !strncmp(t, "<tool_response>", 15) && tn >= 16 &&
		               !strcmp(t + tn - 16, "</tool_response>");
		if (role_is(c, i, "user") && !wrapped) {
			last_query = i;
			break;
		}
	}
	for (size_t i = 0; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (role_is(c, i, "user") || (role_is(c, i, "system") && i > 0)) {
			chatml(b, m->role, m->content);
			continue;
		}
		if (role_is(c, i, "tool")) {
			hermes_tool_msg(c, b, i);
			continue;
		}
		if (!role_is(c, i, "assistant"))
			continue;
		const char *text = m->content, *rp = "";
		size_t tn = strlen(text), rn = 0;
		const char *end = strstr(text, "</think>");
		if (end) {
			const char *last = find_last(text, tn, "</think>") + 8;
			rp = text;
			rn = (size_t)(end - text);
			strip_nl(&rp, &rn, false, true);
			const char *open = find_last(rp, rn, "<think>");
			if (open) {
				rn -= (size_t)(open + 7 - rp);
				rp = open + 7;
			}
			strip_nl(&rp, &rn, true, false);
			tn -= (size_t)(last - text);
			text = last;
			strip_nl(&text, &tn, true, false);
		}
		chat__puts(b, "<|im_start|>assistant\n");
		if (i > last_query && (i + 1 == c->n || rn > 0)) {
			const char *tp = text;
			size_t tpn = tn;
			chat__puts(b, "<think>\n");
			strip_nl(&rp, &rn, true, true);
			chat__put(b, rp, rn);
			chat__puts(b, "\n</think>\n\n");
			strip_nl(&tp, &tpn, true, false);
			chat__put(b, tp, tpn);
		} else {
			chat__put(b, text, tn);
		}
		for (size_t j = 0; j < m->n_calls; j++) {
			if (j > 0 || tn > 0)
				chat__puts(b, "\n");
			hermes_call(c, b, i, j);
		}
		chat__puts(b, "<|im_end|>\n");
	}
	if (gen) {
		chat__puts(b, "<|im_start|>assistant\n");
		if (!thinking)
			chat__puts(b, "<think>\n\n</think>\n\n");
	}
}

/* ------------------------------------------------------------- entry point */

shoal_chat_tools shoal_chat_tool_syntax(shoal_chat_style s)
{
	switch (s) {
	case SHOAL_CHAT_QWEN25:
	case SHOAL_CHAT_QWEN3:
		return SHOAL_CHAT_TOOLS_HERMES;
	case SHOAL_CHAT_LLAMA31:
		return SHOAL_CHAT_TOOLS_LLAMA31;
	case SHOAL_CHAT_MISTRAL:
		return SHOAL_CHAT_TOOLS_MISTRAL;
	case SHOAL_CHAT_DEEPSEEK:
		return SHOAL_CHAT_TOOLS_DEEPSEEK;
	case SHOAL_CHAT_GLM:
		return SHOAL_CHAT_TOOLS_GLM;
	case SHOAL_CHAT_HARMONY:
		return SHOAL_CHAT_TOOLS_HARMONY;
	default:
		return SHOAL_CHAT_TOOLS_NONE;
	}
}

static bool tools_given(const shoal_chat_opts *o)
{
	if (!o || !o->tools)
		return false;
	const char *t = o->tools;
	while (*t == ' ' || *t == '\n' || *t == '\t' || *t == '\r')
		t++;
	return *t && strncmp(t, "[]", 2);
}

bool chat__has_tools(const shoal_chat_msg *msgs, size_t n, const shoal_chat_opts *o)
{
	if (tools_given(o))
		return true;
	for (size_t i = 0; i < n; i++)
		if (msgs[i].n_calls || (msgs[i].role && !strcmp(msgs[i].role, "tool")))
			return true;
	return false;
}

/* Check the conversation and make each call's arguments' tojson. */
static shoal_err tc_check(chat_tc *c, const shoal_chat_opts *o)
{
	size_t n_calls = 0;
	for (size_t i = 0; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (!m->role || !m->content)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_INVAL,
			                 "message %zu has no %s", i, m->role ? "content" : "role");
		if (strcmp(m->role, "system") && strcmp(m->role, "user") &&
		    strcmp(m->role, "assistant") && strcmp(m->role, "tool"))
			return shoal_why(
			    c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			    "message %zu: role \"%.32s\" is not supported (system, user, "
			    "assistant, tool)",
			    i, m->role);
		if (m->n_calls && strcmp(m->role, "assistant"))
			return shoal_why(c->why, c->why_len, SHOAL_ERR_INVAL,
			                 "message %zu: only an assistant message has tool calls",
			                 i);
		if (m->n_calls > SIZE_MAX / 2 - n_calls)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_RANGE,
			                 "too many tool calls");
		n_calls += m->n_calls;
	}
	if (!(c->first = calloc(c->n, sizeof *c->first)) ||
	    !(c->args = calloc(n_calls ? n_calls : 1, sizeof *c->args)))
		return shoal_why(c->why, c->why_len, SHOAL_ERR_NOMEM, "chat render: out of memory");
	size_t k = 0;
	for (size_t i = 0; i < c->n; i++) {
		c->first[i] = k;
		for (size_t j = 0; j < c->m[i].n_calls; j++, k++) {
			const shoal_chat_call *call = &c->m[i].calls[j];
			if (!call->name || !call->name[0])
				return shoal_why(c->why, c->why_len, SHOAL_ERR_INVAL,
				                 "message %zu: tool call %zu has no function name",
				                 i, j);
			const char *a =
			    call->arguments && call->arguments[0] ? call->arguments : "{}";
			json_t *v = json_loads(a, JSON_REJECT_DUPLICATES, NULL);
			bool obj = json_is_object(v);
			c->args[k] = obj ? chat__tojson_value(v, 0) : NULL;
			json_decref(v);
			if (!obj)
				return shoal_why(
				    c->why, c->why_len, SHOAL_ERR_INVAL,
				    "message %zu: tool call %zu's arguments are not a JSON "
				    "object",
				    i, j);
			if (!c->args[k])
				return shoal_why(c->why, c->why_len, SHOAL_ERR_NOMEM,
				                 "chat render: out of memory");
		}
	}
	if (tools_given(o)) {
		c->tools = json_loads(o->tools, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_array(c->tools))
			return shoal_why(c->why, c->why_len, SHOAL_ERR_INVAL,
			                 "the tools are not a JSON array");
	}
	return SHOAL_OK;
}

shoal_err chat__render_tools(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                             const shoal_chat_opts *o, char **out, char *why, size_t why_len)
{
	*out = NULL;
	if (shoal_chat_tool_syntax(s) == SHOAL_CHAT_TOOLS_NONE) /* chat.c says why */
		return SHOAL_ERR_UNSUPPORTED;
	chat_tc c = {.m = msgs, .n = n, .why = why, .why_len = why_len};
	chat_out b = {0};
	shoal_err e = tc_check(&c, o);
	if (!e) {
		if (s == SHOAL_CHAT_QWEN25)
			render_qwen25(&c, &b, o->add_generation_prompt);
		else if (s == SHOAL_CHAT_QWEN3)
			render_qwen3(&c, &b, o->add_generation_prompt, o->thinking != 0);
		else if (s == SHOAL_CHAT_LLAMA31)
			e = chat__tools_llama31(&c, &b, o);
		else if (s == SHOAL_CHAT_MISTRAL)
			e = chat__tools_mistral(&c, &b, o);
		else if (s == SHOAL_CHAT_GLM)
			e = chat__tools_glm(&c, &b, o);
		else if (s == SHOAL_CHAT_HARMONY)
			e = chat__tools_harmony(&c, &b, o);
		else
			e = chat__tools_deepseek(&c, &b, o);
	}
	if (!e) {
		if (!b.oom && !b.p)
			chat__puts(&b, "");
		if (b.oom)
			e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "chat render: out of memory");
	}
	size_t n_calls = 0;
	for (size_t i = 0; c.args && i < n; i++)
		n_calls += msgs[i].n_calls;
	for (size_t k = 0; c.args && k < n_calls; k++)
		free(c.args[k]);
	free(c.args);
	free(c.first);
	json_decref(c.tools);
	if (e) {
		free(b.p);
		return e;
	}
	*out = b.p;
	return SHOAL_OK;
}
