/*
 * models/chat_tools.c: conversations with function calling, in the chat
 * formats whose templates define a tool syntax (models/chat.h).
 *
 * Part: models/. Each renderer mirrors, branch by branch, what its
 * family's template prints when `tools` is given or the history holds an
 * assistant message with tool_calls or a "tool" message, the tools and a
 * call's arguments printed by the templates' `tojson` as transformers
 * defines it (json.dumps, ensure_ascii off). The references are Jinja2
 * renderings of the real templates (tests/unit/test_chat_tools.c).
 *
 * Divisions: tojson; the output buffer; Qwen 2.5 and Qwen 3 (Hermes); the
 * entry point.
 */
#include "models/chat_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ------------------------------------------------------------------ tojson */

typedef struct tj_buf {
	char *p;
	size_t len, cap;
	bool oom; /* sticky */
} tj_buf;

static void tj_put(tj_buf *b, const char *s, size_t n)
{
	if (b->oom || !n)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1 && cap <= SIZE_MAX / 2)
			cap *= 2;
		char *p = cap >= b->len + n + 1 ? realloc(b->p, cap) : NULL;
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void tj_puts(tj_buf *b, const char *s)
{
	tj_put(b, s, strlen(s));
}

/* A string as Python's json.dumps quotes it (ensure_ascii off: UTF-8 as
 * is; control characters as \n-style or \u00xx, lower-case hex). */
static void tj_string(tj_buf *b, const char *s, size_t n)
{
	tj_put(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *e = c == '"'    ? "\\\""
		                : c == '\\' ? "\\\\"
		                : c == '\n' ? "\\n"
		                : c == '\r' ? "\\r"
		                : c == '\t' ? "\\t"
		                : c == '\b' ? "\\b"
		                : c == '\f' ? "\\f"
		                            : NULL;
		char u[8];
		if (!e && c < 0x20) {
			snprintf(u, sizeof u, "\\u%04x", c);
			e = u;
		}
		if (e)
			tj_puts(b, e);
		else
			tj_put(b, s + i, 1);
	}
	tj_put(b, "\"", 1);
}

/* Python's repr of a float: the fewest significant digits that read back
 * the same, positional for exponents in [-4, 16), else d.ddde+XX. */
static void tj_real(tj_buf *b, double v)
{
	char s[48], o[64];
	if (!isfinite(v)) { /* not JSON; jansson never gives one */
		tj_puts(b, v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
		return;
	}
	int p = 1;
	for (; p < 17; p++) {
		snprintf(s, sizeof s, "%.*e", p - 1, v);
		if (strtod(s, NULL) == v)
			break;
	}
	snprintf(s, sizeof s, "%.*e", p - 1, v);
	/* s: [-]d[.ddd]e[+-]XX: its digits and exponent */
	char dig[20];
	int nd = 0, exp = 0;
	const char *c = s;
	bool neg = *c == '-';
	c += neg;
	for (; *c && *c != 'e'; c++)
		if (*c >= '0' && *c <= '9' && nd < (int)sizeof dig - 1)
			dig[nd++] = *c;
	dig[nd] = '\0';
	if (*c == 'e')
		exp = atoi(c + 1);
	size_t w = 0;
	if (neg)
		o[w++] = '-';
	if (exp >= -4 && exp < 16) {
		if (exp + 1 >= nd) { /* digits, zeros, ".0" */
			w += (size_t)snprintf(o + w, sizeof o - w, "%s%.*s.0", dig, exp + 1 - nd,
			                      "0000000000000000");
		} else if (exp >= 0) {
			w += (size_t)snprintf(o + w, sizeof o - w, "%.*s.%s", exp + 1, dig,
			                      dig + exp + 1);
		} else {
			w += (size_t)snprintf(o + w, sizeof o - w, "0.%.*s%s", -exp - 1, "0000",
			                      dig);
		}
	} else {
		w += (size_t)snprintf(o + w, sizeof o - w, "%c%s%s%se%c%02d", dig[0],
		                      nd > 1 ? "." : "", dig + 1, "", exp < 0 ? '-' : '+',
		                      exp < 0 ? -exp : exp);
	}
	tj_put(b, o, w < sizeof o ? w : sizeof o - 1);
}

static void tj_value(tj_buf *b, const json_t *v, unsigned depth)
{
	if (depth > 64) { /* jansson's parser stops at 2048; templates see far less */
		b->oom = true;
		return;
	}
	char s[32];
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		tj_put(b, "{", 1);
		const char *k;
		json_t *x;
		bool first = true;
		json_object_foreach((json_t *)v, k, x)
		{
			if (!first)
				tj_put(b, ", ", 2);
			first = false;
			tj_string(b, k, strlen(k));
			tj_put(b, ": ", 2);
			tj_value(b, x, depth + 1);
		}
		tj_put(b, "}", 1);
		break;
	}
	case JSON_ARRAY:
		tj_put(b, "[", 1);
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i)
				tj_put(b, ", ", 2);
			tj_value(b, json_array_get(v, i), depth + 1);
		}
		tj_put(b, "]", 1);
		break;
	case JSON_STRING:
		tj_string(b, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER:
		snprintf(s, sizeof s, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		tj_puts(b, s);
		break;
	case JSON_REAL:
		tj_real(b, json_real_value(v));
		break;
	case JSON_TRUE:
		tj_puts(b, "true");
		break;
	case JSON_FALSE:
		tj_puts(b, "false");
		break;
	case JSON_NULL:
		tj_puts(b, "null");
		break;
	}
}

static char *tojson_of(const json_t *v)
{
	tj_buf b = {0};
	tj_value(&b, v, 0);
	if (!b.oom && !b.p)
		tj_puts(&b, "");
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

char *chat__tojson(const char *json, size_t len)
{
	json_t *v = json_loadb(json, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	if (!v)
		return NULL;
	char *s = tojson_of(v);
	json_decref(v);
	return s;
}

/* ------------------------------------------------------------ conversation */

typedef struct tc_conv {
	const shoal_chat_msg *m;
	size_t n;
	json_t *tools; /* the tools array, NULL: none */
	char **args;   /* per call, in message order: its arguments' tojson */
	size_t *first; /* (n) index of each message's first call in args */
	char *why;
	size_t why_len;
} tc_conv;

static bool role_is(const tc_conv *c, size_t i, const char *r)
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
static void hermes_tools(const tc_conv *c, tj_buf *b)
{
	tj_puts(b, hermes_intro);
	for (size_t i = 0; i < json_array_size(c->tools); i++) {
		char *t = tojson_of(json_array_get(c->tools, i));
		if (!t) {
			b->oom = true;
			return;
		}
		tj_puts(b, "\n");
		tj_puts(b, t);
		free(t);
	}
	tj_puts(b, hermes_outro);
}

static void hermes_call(const tc_conv *c, tj_buf *b, size_t i, size_t j)
{
	tj_puts(b, "<tool_call>\n{\"name\": \"");
	tj_puts(b, c->m[i].calls[j].name);
	tj_puts(b, "\", \"arguments\": ");
	tj_puts(b, c->args[c->first[i] + j]);
	tj_puts(b, "}\n</tool_call>");
}

/* Both templates: consecutive tool messages share one user turn. */
static void hermes_tool_msg(const tc_conv *c, tj_buf *b, size_t i)
{
	if (i == 0 || !role_is(c, i - 1, "tool"))
		tj_puts(b, "<|im_start|>user");
	tj_puts(b, "\n<tool_response>\n");
	tj_puts(b, c->m[i].content);
	tj_puts(b, "\n</tool_response>");
	if (i + 1 == c->n || !role_is(c, i + 1, "tool"))
		tj_puts(b, "<|im_end|>\n");
}

static void chatml(tj_buf *b, const char *role, const char *text)
{
	tj_puts(b, "<|im_start|>");
	tj_puts(b, role);
	tj_puts(b, "\n");
	tj_puts(b, text);
	tj_puts(b, "<|im_end|>\n");
}

static void render_qwen25(const tc_conv *c, tj_buf *b, bool gen)
{
	static const char *const dflt =
	    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
	bool sys0 = role_is(c, 0, "system");
	if (c->tools) {
		tj_puts(b, "<|im_start|>system\n");
		tj_puts(b, sys0 ? c->m[0].content : dflt);
		tj_puts(b, "\n\n");
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
			tj_puts(b, "<|im_start|>assistant");
			if (m->content[0]) {
				tj_puts(b, "\n");
				tj_puts(b, m->content);
			}
			for (size_t j = 0; j < m->n_calls; j++) {
				tj_puts(b, "\n");
				hermes_call(c, b, i, j);
			}
			tj_puts(b, "<|im_end|>\n");
		} else if (role_is(c, i, "tool")) {
			hermes_tool_msg(c, b, i);
		}
	}
	if (gen)
		tj_puts(b, "<|im_start|>assistant\n");
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

static void render_qwen3(const tc_conv *c, tj_buf *b, bool gen, bool thinking)
{
	bool sys0 = role_is(c, 0, "system");
	if (c->tools) {
		tj_puts(b, "<|im_start|>system\n");
		if (sys0) {
			tj_puts(b, c->m[0].content);
			tj_puts(b, "\n\n");
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
		tj_puts(b, "<|im_start|>assistant\n");
		if (i > last_query && (i + 1 == c->n || rn > 0)) {
			const char *tp = text;
			size_t tpn = tn;
			tj_puts(b, "<think>\n");
			strip_nl(&rp, &rn, true, true);
			tj_put(b, rp, rn);
			tj_puts(b, "\n</think>\n\n");
			strip_nl(&tp, &tpn, true, false);
			tj_put(b, tp, tpn);
		} else {
			tj_put(b, text, tn);
		}
		for (size_t j = 0; j < m->n_calls; j++) {
			if (j > 0 || tn > 0)
				tj_puts(b, "\n");
			hermes_call(c, b, i, j);
		}
		tj_puts(b, "<|im_end|>\n");
	}
	if (gen) {
		tj_puts(b, "<|im_start|>assistant\n");
		if (!thinking)
			tj_puts(b, "<think>\n\n</think>\n\n");
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
static shoal_err tc_check(tc_conv *c, const shoal_chat_opts *o)
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
			c->args[k] = obj ? tojson_of(v) : NULL;
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
	if (shoal_chat_tool_syntax(s) != SHOAL_CHAT_TOOLS_HERMES) /* chat.c says which */
		return SHOAL_ERR_UNSUPPORTED;
	tc_conv c = {.m = msgs, .n = n, .why = why, .why_len = why_len};
	tj_buf b = {0};
	shoal_err e = tc_check(&c, o);
	if (!e) {
		if (s == SHOAL_CHAT_QWEN25)
			render_qwen25(&c, &b, o->add_generation_prompt);
		else
			render_qwen3(&c, &b, o->add_generation_prompt, o->thinking != 0);
		if (!b.oom && !b.p)
			tj_puts(&b, "");
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
