/*
 * models/chat_tools_fmt.c: conversations with function calling in Llama
 * 3.1, Mistral Nemo and DeepSeek V3.1's formats, and GLM-4.5/4.6's whole
 * format (models/chat.h says what each prints and the choices made where
 * a template cannot serve an API's conversation).
 *
 * Part: models/ (chat). Each renderer follows its template branch by
 * branch, with tools given as a JSON array of OpenAI tool objects and a
 * call's arguments already printed by tojson (chat_tools.c checked the
 * conversation). The references are Jinja2 renderings of the real
 * templates (tests/sh/chat_jinja.sh, tests/sh/chat_tools_jinja.sh).
 */
#include "models/chat_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_role(const chat_tc *c, size_t i, const char *r)
{
	return i < c->n && !strcmp(c->m[i].role, r);
}

/* Jinja's trim on ASCII whitespace (what chat.c's formats do). */
static void put_trimmed(chat_out *b, const char *s)
{
	size_t n = strlen(s);
	while (n &&
	       (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r' ||
	             s[n - 1] == '\f' || s[n - 1] == '\v'))
		n--;
	chat__put(b, s, n);
}

static void put_tojson(chat_out *b, const json_t *v, unsigned indent)
{
	char *t = chat__tojson_value(v, indent);
	if (!t) {
		b->oom = true;
		return;
	}
	chat__puts(b, t);
	free(t);
}

/* ---------------------------------------------------------------- Llama 3.1 */

static const char *const llama_header_end = "<|end_header_id|>\n\n";

static void llama_header(chat_out *b, const char *role)
{
	chat__puts(b, "<|start_header_id|>");
	chat__puts(b, role);
	chat__puts(b, llama_header_end);
}

shoal_err chat__tools_llama31(const chat_tc *c, chat_out *b, const shoal_chat_opts *o)
{
	size_t i = 0;
	chat__puts(b, o->bos ? o->bos : "");
	llama_header(b, "system");
	if (c->tools)
		chat__puts(b, "Environment: ipython\n");
	chat__puts(b, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
	if (is_role(c, 0, "system"))
		put_trimmed(b, c->m[i++].content);
	chat__puts(b, "<|eot_id|>");
	if (c->tools) { /* the tools go into the first message after the system one */
		if (i == c->n)
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "llama3.1: tools need a first user message to go into");
		llama_header(b, "user");
		chat__puts(b, "Given the following functions, please respond with a JSON for a "
		              "function call with its proper arguments that best answers the "
		              "given prompt.\n\nRespond in the format {\"name\": function name, "
		              "\"parameters\": dictionary of argument name and its value}.Do not "
		              "use variables.\n\n");
		for (size_t t = 0; t < json_array_size(c->tools); t++) {
			put_tojson(b, json_array_get(c->tools, t), 4);
			chat__puts(b, "\n\n");
		}
		put_trimmed(b, c->m[i++].content);
		chat__puts(b, "<|eot_id|>");
	}
	for (; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (m->n_calls) {
			if (m->n_calls != 1)
				return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
				                 "llama3.1: message %zu has %zu tool calls; the "
				                 "format takes one call per assistant message",
				                 i, m->n_calls);
			llama_header(b, "assistant");
			chat__puts(b, "{\"name\": \"");
			chat__puts(b, m->calls[0].name);
			chat__puts(b, "\", \"parameters\": ");
			chat__puts(b, c->args[c->first[i]]);
			chat__puts(b, "}<|eot_id|>");
		} else if (is_role(c, i, "tool")) { /* a string is iterable: tojson */
			llama_header(b, "ipython");
			chat__json_string(b, m->content, strlen(m->content));
			chat__puts(b, "<|eot_id|>");
		} else {
			llama_header(b, m->role);
			put_trimmed(b, m->content);
			chat__puts(b, "<|eot_id|>");
		}
	}
	if (o->add_generation_prompt)
		llama_header(b, "assistant");
	return SHOAL_OK;
}

/* ------------------------------------------------------------ Mistral Nemo */

/* A call id as the format wants it: 9 letters and digits kept, anything
 * else 9 base-62 digits of its FNV-1a 64 hash. */
static void mistral_id(const char *id, char out[10])
{
	size_t n = strlen(id), ok = n == 9;
	for (size_t k = 0; ok && k < n; k++)
		ok = (id[k] >= '0' && id[k] <= '9') || (id[k] >= 'a' && id[k] <= 'z') ||
		     (id[k] >= 'A' && id[k] <= 'Z');
	if (ok) {
		memcpy(out, id, 10);
		return;
	}
	static const char digits[] =
	    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t k = 0; k < n; k++)
		h = (h ^ (unsigned char)id[k]) * 0x100000001b3ull;
	for (int k = 0; k < 9; k++, h /= 62)
		out[k] = digits[h % 62];
	out[9] = '\0';
}

/* The tool list before the last user message: each function's members
 * but "return", strings printed raw between quotes (as the template
 * does), the others by tojson. */
static void mistral_tools(const chat_tc *c, chat_out *b)
{
	chat__puts(b, "[AVAILABLE_TOOLS][");
	for (size_t t = 0; t < json_array_size(c->tools); t++) {
		json_t *f = json_object_get(json_array_get(c->tools, t), "function");
		chat__puts(b, "{\"type\": \"function\", \"function\": {");
		const char *k;
		json_t *v;
		bool first = true;
		json_object_foreach(f, k, v)
		{
			if (!strcmp(k, "return"))
				continue;
			if (!first)
				chat__puts(b, ", ");
			first = false;
			chat__puts(b, "\"");
			chat__puts(b, k);
			chat__puts(b, "\": ");
			if (json_is_string(v)) {
				chat__puts(b, "\"");
				chat__put(b, json_string_value(v), json_string_length(v));
				chat__puts(b, "\"");
			} else {
				put_tojson(b, v, 0);
			}
		}
		chat__puts(b, t + 1 < json_array_size(c->tools) ? "}}, " : "}}]");
	}
	chat__puts(b, "[/AVAILABLE_TOOLS]");
}

shoal_err chat__tools_mistral(const chat_tc *c, chat_out *b, const shoal_chat_opts *o)
{
	size_t from = is_role(c, 0, "system") ? 1 : 0, turn = 0, last_user = SIZE_MAX;
	for (size_t i = from; i < c->n; i++) {
		if (is_role(c, i, "tool") || c->m[i].n_calls)
			continue;
		if (is_role(c, i, "user") != (turn % 2 == 0))
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "mistral-nemo: message %zu: after an optional system "
			                 "message, user and assistant turns must alternate",
			                 i);
		turn++;
		if (is_role(c, i, "user"))
			last_user = i;
	}
	chat__puts(b, o->bos ? o->bos : "");
	char id[10];
	for (size_t i = from; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (is_role(c, i, "user")) {
			/* the template compares messages: an earlier user turn
			 * equal to the last one gets the tools too */
			if (c->tools && last_user != SIZE_MAX &&
			    !strcmp(m->content, c->m[last_user].content))
				mistral_tools(c, b);
			chat__puts(b, "[INST]");
			if (i + 1 == c->n && from) {
				chat__puts(b, c->m[0].content);
				chat__puts(b, "\n\n");
			}
			chat__puts(b, m->content);
			chat__puts(b, "[/INST]");
		} else if (m->n_calls) {
			chat__puts(b, "[TOOL_CALLS][");
			for (size_t j = 0; j < m->n_calls; j++) {
				if (!m->calls[j].id)
					return shoal_why(
					    c->why, c->why_len, SHOAL_ERR_INVAL,
					    "mistral-nemo: message %zu: tool call %zu has "
					    "no id (the format pairs calls and results "
					    "by id)",
					    i, j);
				mistral_id(m->calls[j].id, id);
				chat__puts(b, "{\"name\": ");
				chat__json_string(b, m->calls[j].name, strlen(m->calls[j].name));
				chat__puts(b, ", \"arguments\": ");
				chat__puts(b, c->args[c->first[i] + j]);
				chat__puts(b, ", \"id\": \"");
				chat__puts(b, id);
				chat__puts(b, j + 1 < m->n_calls ? "\"}, " : "\"}]");
			}
			chat__puts(b, o->eos ? o->eos : "");
		} else if (is_role(c, i, "assistant")) {
			chat__puts(b, m->content);
			chat__puts(b, o->eos ? o->eos : "");
		} else if (is_role(c, i, "tool")) {
			if (!m->tool_call_id)
				return shoal_why(c->why, c->why_len, SHOAL_ERR_INVAL,
				                 "mistral-nemo: message %zu: a tool message needs "
				                 "the tool_call_id of its call",
				                 i);
			mistral_id(m->tool_call_id, id);
			chat__puts(b, "[TOOL_RESULTS]{\"content\": ");
			chat__puts(b, m->content);
			chat__puts(b, ", \"call_id\": \"");
			chat__puts(b, id);
			chat__puts(b, "\"}[/TOOL_RESULTS]");
		} else {
			return shoal_why(c->why, c->why_len, SHOAL_ERR_UNSUPPORTED,
			                 "mistral-nemo: message %zu: a system message is only "
			                 "allowed first",
			                 i);
		}
	}
	return SHOAL_OK;
}

/* ----------------------------------------------------------- DeepSeek V3.1 */

/* The tools as a system text (the template prints none). */
static void deepseek_tools(const chat_tc *c, chat_out *b)
{
	chat__puts(b, "## Tools\n\nYou can call these functions:\n");
	for (size_t t = 0; t < json_array_size(c->tools); t++) {
		json_t *f = json_object_get(json_array_get(c->tools, t), "function");
		json_t *d = json_object_get(f, "description"),
		       *p = json_object_get(f, "parameters");
		chat__puts(b, "\n### ");
		chat__puts(b, json_string_value(json_object_get(f, "name")) ?: "");
		if (json_is_string(d)) {
			chat__puts(b, "\nDescription: ");
			chat__puts(b, json_string_value(d));
		}
		chat__puts(b, "\nParameters: ");
		if (p)
			put_tojson(b, p, 0);
		else
			chat__puts(b, "{}");
		chat__puts(b, "\n");
	}
	chat__puts(b, "\nTo call functions, write exactly " DS_CALLS_BEGIN DS_CALL_BEGIN
	              "NAME" DS_SEP "ARGUMENTS" DS_CALL_END DS_CALLS_END
	              ", where ARGUMENTS is a JSON object that fits the function's "
	              "parameters; for several calls, put one " DS_CALL_BEGIN "..." DS_CALL_END
	              " after another with nothing between them.");
}

shoal_err chat__tools_deepseek(const chat_tc *c, chat_out *b, const shoal_chat_opts *o)
{
	chat__puts(b, o->bos ? o->bos : "");
	bool any = false;
	if (c->tools) {
		deepseek_tools(c, b);
		any = true;
	}
	for (size_t i = 0; i < c->n; i++)
		if (is_role(c, i, "system")) {
			if (any)
				chat__puts(b, "\n\n");
			chat__puts(b, c->m[i].content);
			any = true;
		}
	bool last_user = false, is_tool = false;
	for (size_t i = 0; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (is_role(c, i, "user")) {
			is_tool = false;
			last_user = true;
			chat__puts(b, DS_USER);
			chat__puts(b, m->content);
		} else if (m->n_calls) {
			if (last_user)
				chat__puts(b, DS_ASSISTANT "<think></think>");
			last_user = is_tool = false;
			chat__puts(b, m->content);
			chat__puts(b, DS_CALLS_BEGIN);
			for (size_t j = 0; j < m->n_calls; j++) {
				chat__puts(b, DS_CALL_BEGIN);
				chat__puts(b, m->calls[j].name);
				chat__puts(b, DS_SEP);
				chat__puts(b, c->args[c->first[i] + j]);
				chat__puts(b, DS_CALL_END);
			}
			chat__puts(b, DS_CALLS_END DS_EOS);
		} else if (is_role(c, i, "assistant")) {
			if (last_user)
				chat__puts(b, DS_ASSISTANT "<think></think>");
			last_user = false;
			const char *text = m->content, *end = strstr(text, "</think>");
			if (!is_tool && end)
				text = end + strlen("</think>");
			is_tool = false;
			chat__puts(b, text);
			chat__puts(b, DS_EOS);
		} else if (is_role(c, i, "tool")) {
			last_user = false;
			is_tool = true;
			chat__puts(b, DS_OUT_BEGIN);
			chat__puts(b, m->content);
			chat__puts(b, DS_OUT_END);
		}
	}
	if (o->add_generation_prompt && last_user && !is_tool)
		chat__puts(b, o->thinking == 1 ? DS_ASSISTANT "<think>"
		                               : DS_ASSISTANT "<think></think>");
	return SHOAL_OK;
}

/* ------------------------------------------------------------- GLM-4.5/4.6 */

static bool py_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* Python's str.strip() (ASCII white space) of s[0..n): into *p, *n. */
static void py_strip(const char **p, size_t *n)
{
	while (*n && py_space(**p))
		(*p)++, (*n)--;
	while (*n && py_space((*p)[*n - 1]))
		(*n)--;
}

static const char *find_in(const char *s, size_t n, const char *needle, bool last)
{
	size_t k = strlen(needle);
	const char *hit = NULL;
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(s + i, needle, k)) {
			hit = s + i;
			if (!last)
				break;
		}
	return hit;
}

/* One assistant turn: its reasoning (shown after the last user turn),
 * its text, its calls. */
static shoal_err glm_assistant(const chat_tc *c, chat_out *b, size_t i, bool after_user)
{
	const shoal_chat_msg *m = &c->m[i];
	const char *text = m->content, *rp = "";
	size_t tn = strlen(text), rn = 0;
	const char *close = find_in(text, tn, "</think>", false);
	if (close) { /* the template's split('</think>') and split('<think>') */
		rp = text;
		rn = (size_t)(close - text);
		while (rn && rp[rn - 1] == '\n')
			rn--;
		const char *open = find_in(rp, rn, "<think>", true);
		if (open) {
			rn -= (size_t)(open + 7 - rp);
			rp = open + 7;
		}
		while (rn && *rp == '\n')
			rp++, rn--;
		const char *last = find_in(text, tn, "</think>", true) + 8;
		tn -= (size_t)(last - text);
		text = last;
		while (tn && *text == '\n')
			text++, tn--;
	}
	chat__puts(b, "<|assistant|>");
	if (after_user && rn) {
		py_strip(&rp, &rn);
		chat__puts(b, "\n<think>");
		chat__put(b, rp, rn);
		chat__puts(b, "</think>");
	} else {
		chat__puts(b, "\n<think></think>");
	}
	py_strip(&text, &tn);
	if (tn) {
		chat__puts(b, "\n");
		chat__put(b, text, tn);
	}
	for (size_t j = 0; j < m->n_calls; j++) {
		json_t *args = json_loads(c->args[c->first[i] + j], 0, NULL);
		if (!args) {
			b->oom = true;
			return SHOAL_OK;
		}
		chat__puts(b, "\n<tool_call>");
		chat__puts(b, m->calls[j].name);
		const char *k;
		json_t *v;
		json_object_foreach(args, k, v)
		{
			chat__puts(b, "\n<arg_key>");
			chat__puts(b, k);
			chat__puts(b, "</arg_key>\n<arg_value>");
			if (json_is_string(v))
				chat__put(b, json_string_value(v), json_string_length(v));
			else
				put_tojson(b, v, 0);
			chat__puts(b, "</arg_value>");
		}
		chat__puts(b, "\n</tool_call>");
		json_decref(args);
	}
	return SHOAL_OK;
}

shoal_err chat__tools_glm(const chat_tc *c, chat_out *b, const shoal_chat_opts *o)
{
	chat__puts(b, "[gMASK]<sop>");
	if (c->tools) {
		chat__puts(b, "<|system|>\n# Tools\n\nYou may call one or more functions to assist "
		              "with the user query.\n\nYou are provided with function signatures "
		              "within <tools></tools> XML tags:\n<tools>\n");
		for (size_t t = 0; t < json_array_size(c->tools); t++) {
			put_tojson(b, json_array_get(c->tools, t), 0);
			chat__puts(b, "\n");
		}
		chat__puts(
		    b, "</tools>\n\nFor each function call, output the function name and "
		       "arguments within the following XML format:\n<tool_call>{function-name}"
		       "\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
		       "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n"
		       "...\n</tool_call>");
	}
	size_t last_user = SIZE_MAX;
	for (size_t i = 0; i < c->n; i++)
		if (is_role(c, i, "user"))
			last_user = i;
	for (size_t i = 0; i < c->n; i++) {
		const shoal_chat_msg *m = &c->m[i];
		if (is_role(c, i, "user")) {
			chat__puts(b, "<|user|>\n");
			chat__puts(b, m->content);
			size_t n = strlen(m->content);
			if (o->thinking == 0 &&
			    !(n >= 8 && !strcmp(m->content + n - 8, "/nothink")))
				chat__puts(b, "/nothink");
		} else if (is_role(c, i, "assistant")) {
			glm_assistant(c, b, i, last_user == SIZE_MAX || i > last_user);
		} else if (is_role(c, i, "tool")) {
			if (i == 0 || !is_role(c, i - 1, "tool"))
				chat__puts(b, "<|observation|>");
			chat__puts(b, "\n<tool_response>\n");
			chat__puts(b, m->content);
			chat__puts(b, "\n</tool_response>");
		} else {
			chat__puts(b, "<|system|>\n");
			chat__puts(b, m->content);
		}
	}
	if (o->add_generation_prompt)
		chat__puts(b,
		           o->thinking == 0 ? "<|assistant|>\n<think></think>" : "<|assistant|>");
	return SHOAL_OK;
}
