/*
 * models/tool_call.c: a model's reply read back as function calls
 * (models/tool_call.h), one reader per tool syntax:
 *
 *   HERMES   (Qwen 2.5, Qwen 3): content, then one or more
 *            "<tool_call>" JSON "</tool_call>", the JSON {"name": N,
 *            "arguments": A} (A an object, or a string holding one).
 *   LLAMA31  (Llama 3.1-3.3): the whole reply is a JSON {"name": N,
 *            "parameters": A}, optionally after "<|python_tag|>"; several
 *            joined by ";".
 *   MISTRAL  (Nemo): content, "[TOOL_CALLS]", a JSON array of {"name": N,
 *            "arguments": A, "id": I}.
 *   DEEPSEEK (V3.1): content, then <｜tool▁calls▁begin｜>, per call
 *            <｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>, then
 *            <｜tool▁calls▁end｜>.
 *   GLM      (4.5, 4.6): content, then per call "<tool_call>N" and per
 *            argument "<arg_key>K</arg_key><arg_value>V</arg_value>"
 *            (white space between), "</tool_call>"; V is JSON where it
 *            reads as JSON, else a string.
 *   HARMONY  (gpt-oss): the answer as models/reply.c gives it: content,
 *            then per call "<|channel|>commentary to=functions.N
 *            [json]<|message|>A" (the recipient where the model put it
 *            moved after the channel's name).
 *
 * Part: models/. Text that ends inside a call is PARTIAL, text that breaks
 * the syntax is BAD: both keep the whole text as content.
 */
#include "models/tool_call.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "models/ds_tokens.h"

/* A cursor over the text. */
typedef struct tc_cur {
	const char *p, *end;
} tc_cur;

static void skip_ws(tc_cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\t' || *c->p == '\r'))
		c->p++;
}

/* c starts with s: 1; c is a proper prefix of s (the text ends first): 2;
 * else 0. */
static int take(tc_cur *c, const char *s)
{
	size_t n = strlen(s), have = (size_t)(c->end - c->p);
	if (have < n)
		return memcmp(c->p, s, have) ? 0 : 2;
	if (memcmp(c->p, s, n))
		return 0;
	c->p += n;
	return 1;
}

static const char *find(const char *p, const char *end, const char *s)
{
	size_t n = strlen(s);
	for (; p + n <= end; p++)
		if (!memcmp(p, s, n))
			return p;
	return NULL;
}

/* The result of reading one piece. */
typedef enum { R_OK, R_PARTIAL, R_BAD } tc_res;

static tc_res bad(shoal_tool_parsed *p, const char *fmt, const char *arg)
{
	snprintf(p->why, sizeof p->why, fmt, arg);
	return R_BAD;
}

/* One JSON value at c (advanced past it). */
static tc_res json_at(tc_cur *c, json_t **out, shoal_tool_parsed *p)
{
	json_error_t je;
	*out = json_loadb(c->p, (size_t)(c->end - c->p),
	                  JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (!*out) {
		if (json_error_code(&je) == json_error_premature_end_of_input ||
		    (size_t)je.position >= (size_t)(c->end - c->p))
			return R_PARTIAL;
		return bad(p, "the call's JSON: %.100s", je.text);
	}
	c->p += je.position;
	return R_OK;
}

/* Add a call from name and arguments (an object, or a string of one). */
static tc_res add_call(shoal_tool_parsed *p, json_t *name, json_t *args, json_t *id)
{
	if (!json_is_string(name) || !json_string_length(name))
		return bad(p, "%s", "a call without a function name");
	const char *nm = json_string_value(name);
	for (size_t i = 0; i < json_string_length(name); i++)
		if ((unsigned char)nm[i] < 0x20 || nm[i] == 0x7f)
			return bad(p, "%s", "a control character in a function name");
	json_t *parsed = NULL;
	if (json_is_string(args)) /* some models quote the arguments */
		args = parsed = json_loads(json_string_value(args), JSON_REJECT_DUPLICATES, NULL);
	else if (!args)
		args = parsed = json_object();
	if (!json_is_object(args)) {
		json_decref(parsed);
		return bad(p, "the arguments of %.64s are not a JSON object",
		           json_string_value(name));
	}
	if (p->n_calls == SHOAL_TOOL_MAX_CALLS) {
		json_decref(parsed);
		return bad(p, "more than %s calls", "64");
	}
	shoal_tool_call *k = &p->calls[p->n_calls];
	k->name = strdup(json_string_value(name));
	k->arguments = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
	k->id = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
	json_decref(parsed);
	p->n_calls++;
	if (!k->name || !k->arguments || (json_is_string(id) && !k->id))
		return bad(p, "%s", "out of memory");
	return R_OK;
}

/* A JSON object {"name", "arguments"|"parameters"[, "id"]} as a call. */
static tc_res call_object(shoal_tool_parsed *p, json_t *o)
{
	if (!json_is_object(o))
		return bad(p, "%s", "a call that is not a JSON object");
	json_t *args = json_object_get(o, "arguments");
	if (!args)
		args = json_object_get(o, "parameters");
	return add_call(p, json_object_get(o, "name"), args, json_object_get(o, "id"));
}

/* ------------------------------------------------------------- the readers */

static tc_res read_hermes(tc_cur *c, shoal_tool_parsed *p)
{
	for (;;) {
		skip_ws(c);
		if (c->p == c->end)
			return R_OK;
		int t = take(c, "<tool_call>");
		if (t == 2)
			return R_PARTIAL;
		if (!t)
			return bad(p, "%s", "text after a call");
		skip_ws(c);
		json_t *o;
		tc_res r = json_at(c, &o, p);
		if (r != R_OK)
			return r;
		r = call_object(p, o);
		json_decref(o);
		if (r != R_OK)
			return r;
		skip_ws(c);
		if (c->p == c->end)
			return R_PARTIAL;
		t = take(c, "</tool_call>");
		if (t != 1)
			return t == 2 ? R_PARTIAL : bad(p, "%s", "a call without </tool_call>");
	}
}

static tc_res read_llama31(tc_cur *c, shoal_tool_parsed *p)
{
	for (;;) {
		json_t *o;
		tc_res r = json_at(c, &o, p);
		if (r != R_OK)
			return r;
		r = call_object(p, o);
		json_decref(o);
		if (r != R_OK)
			return r;
		skip_ws(c);
		if (c->p == c->end)
			return R_OK;
		if (*c->p != ';')
			return bad(p, "%s", "text after a call");
		c->p++;
		skip_ws(c);
		if (c->p == c->end)
			return R_OK;
	}
}

static tc_res read_mistral(tc_cur *c, shoal_tool_parsed *p)
{
	skip_ws(c);
	json_t *a;
	tc_res r = json_at(c, &a, p);
	if (r != R_OK)
		return r;
	if (!json_is_array(a)) {
		json_decref(a);
		return bad(p, "%s", "[TOOL_CALLS] not followed by a JSON array");
	}
	for (size_t i = 0; r == R_OK && i < json_array_size(a); i++)
		r = call_object(p, json_array_get(a, i));
	json_decref(a);
	if (r == R_OK && !p->n_calls)
		return bad(p, "%s", "[TOOL_CALLS] with no call");
	skip_ws(c);
	return r != R_OK || c->p == c->end ? r : bad(p, "%s", "text after the calls");
}

static tc_res read_deepseek(tc_cur *c, shoal_tool_parsed *p)
{
	for (;;) {
		int t = take(c, DS_CALLS_END);
		if (t == 1 && !p->n_calls)
			return bad(p, "%s", "the calls' tokens with no call");
		if (t == 1) {
			skip_ws(c);
			return c->p == c->end ? R_OK : bad(p, "%s", "text after the calls");
		}
		if (t == 2 || c->p == c->end)
			return R_PARTIAL;
		if ((t = take(c, DS_CALL_BEGIN)) != 1)
			return t == 2 ? R_PARTIAL : bad(p, "%s", "a call without its begin token");
		const char *sep = find(c->p, c->end, DS_SEP);
		if (!sep)
			return R_PARTIAL;
		json_t *name = json_stringn(c->p, (size_t)(sep - c->p));
		c->p = sep + strlen(DS_SEP);
		json_t *args;
		tc_res r = json_at(c, &args, p);
		if (r == R_OK) {
			r = add_call(p, name, args, NULL);
			json_decref(args);
		}
		json_decref(name);
		if (r != R_OK)
			return r;
		if ((t = take(c, DS_CALL_END)) != 1)
			return t == 2 || c->p == c->end
			           ? R_PARTIAL
			           : bad(p, "%s", "a call without its end token");
	}
}

/* n bytes of s as a string; s need not be terminated (a model's text, a
 * fuzzer's bytes): not strndup, which may look one byte past n. */
static char *dup_n(const char *s, size_t n)
{
	char *t = malloc(n + 1);
	if (t) {
		memcpy(t, s, n);
		t[n] = '\0';
	}
	return t;
}

/* Text up to the tag s (c advanced past the tag), or PARTIAL. */
static tc_res upto(tc_cur *c, const char *s, const char **from, size_t *n)
{
	const char *e = find(c->p, c->end, s);
	if (!e)
		return R_PARTIAL;
	*from = c->p;
	*n = (size_t)(e - c->p);
	c->p = e + strlen(s);
	return R_OK;
}

/* One argument's value: JSON where it reads as JSON (numbers, booleans,
 * objects), else the text as a string (the format prints strings bare). */
static json_t *glm_value(const char *v, size_t n)
{
	json_t *j = json_loadb(v, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
	return j ? j : json_stringn(v, n);
}

static tc_res glm_call(tc_cur *c, shoal_tool_parsed *p)
{
	size_t nn = 0;
	const char *name = c->p;
	while (c->p < c->end && *c->p != '\n' && *c->p != '<')
		c->p++, nn++;
	if (c->p == c->end)
		return R_PARTIAL;
	while (nn && (name[nn - 1] == ' ' || name[nn - 1] == '\r' || name[nn - 1] == '\t'))
		nn--;
	json_t *args = json_object();
	tc_res r = R_OK;
	for (;;) {
		skip_ws(c);
		int t = take(c, "</tool_call>");
		if (t == 1)
			break;
		if (t == 2 || c->p == c->end) {
			r = R_PARTIAL;
			break;
		}
		if ((t = take(c, "<arg_key>")) != 1) {
			r = t == 2 ? R_PARTIAL
			           : bad(p, "%s", "a call holds text that is no <arg_key>");
			break;
		}
		const char *k, *v;
		size_t kn, vn;
		if ((r = upto(c, "</arg_key>", &k, &kn)) != R_OK)
			break;
		skip_ws(c);
		if ((t = take(c, "<arg_value>")) != 1) {
			r = t == 2 || c->p == c->end
			        ? R_PARTIAL
			        : bad(p, "%s", "an <arg_key> without its <arg_value>");
			break;
		}
		if ((r = upto(c, "</arg_value>", &v, &vn)) != R_OK)
			break;
		char *key = dup_n(k, kn);
		json_t *val = glm_value(v, vn);
		if (!key || !val) {
			free(key);
			json_decref(val);
			r = bad(p, "%s", "out of memory");
			break;
		}
		if (json_object_get(args, key)) {
			r = bad(p, "the argument %.64s comes twice", key);
			free(key);
			json_decref(val);
			break;
		}
		json_object_set_new(args, key, val);
		free(key);
	}
	if (r == R_OK) {
		json_t *nm = json_stringn(name, nn);
		r = add_call(p, nm, args, NULL);
		json_decref(nm);
	}
	json_decref(args);
	return r;
}

static tc_res read_glm(tc_cur *c, shoal_tool_parsed *p)
{
	for (;;) {
		int t = take(c, "<tool_call>");
		if (t == 2)
			return R_PARTIAL;
		if (t == 0)
			return bad(p, "%s", "text after the calls");
		tc_res r = glm_call(c, p);
		if (r != R_OK)
			return r;
		skip_ws(c);
		if (c->p == c->end)
			return R_OK;
	}
}

static tc_res read_harmony(tc_cur *c, shoal_tool_parsed *p)
{
	for (;;) {
		int t = take(c, "<|channel|>");
		if (t == 2)
			return R_PARTIAL;
		if (t == 0)
			return bad(p, "%s", "text after the calls");
		const char *h;
		size_t hn;
		tc_res r = upto(c, "<|message|>", &h, &hn);
		if (r != R_OK)
			return r;
		const char *to = find(h, h + hn, "to=functions.");
		if (!to)
			return bad(p, "%s", "a message on a channel that names no function");
		const char *nm = to + strlen("to=functions.");
		size_t nn = 0;
		while (nm + nn < h + hn && nm[nn] != ' ' && nm[nn] != '<' && nm[nn] != '\n')
			nn++;
		const char *body = c->p, *e = find(c->p, c->end, "<|channel|>");
		c->p = e ? e : c->end;
		json_t *args =
		    json_loadb(body, (size_t)(c->p - body), JSON_REJECT_DUPLICATES, NULL);
		json_t *jn = json_stringn(nm, nn);
		r = args ? add_call(p, jn, args, NULL)
		         : bad(p, "the arguments of %.64s are not JSON", json_string_value(jn));
		json_decref(jn);
		json_decref(args);
		if (r != R_OK || c->p == c->end)
			return r;
	}
}

/* Where the calls begin (the opener's offset), or NULL: none. */
static const char *opener(shoal_chat_tools syn, const char *text, size_t len, size_t *skip)
{
	const char *end = text + len, *o = NULL;
	switch (syn) {
	case SHOAL_CHAT_TOOLS_HERMES:
	case SHOAL_CHAT_TOOLS_GLM:
		o = find(text, end, "<tool_call>");
		*skip = 0; /* the reader takes the tag itself */
		break;
	case SHOAL_CHAT_TOOLS_HARMONY:
		o = find(text, end, "<|channel|>");
		*skip = 0;
		break;
	case SHOAL_CHAT_TOOLS_MISTRAL:
		o = find(text, end, "[TOOL_CALLS]");
		*skip = strlen("[TOOL_CALLS]");
		break;
	case SHOAL_CHAT_TOOLS_DEEPSEEK:
		o = find(text, end, DS_CALLS_BEGIN);
		*skip = strlen(DS_CALLS_BEGIN);
		break;
	case SHOAL_CHAT_TOOLS_LLAMA31: {
		/* only a reply that is a call: it opens with the tag or "{" */
		tc_cur c = {text, end};
		skip_ws(&c);
		if (take(&c, "<|python_tag|>") == 1) {
			o = text;
			*skip = (size_t)(c.p - text);
		} else if (c.p < end && *c.p == '{') {
			o = text;
			*skip = (size_t)(c.p - text);
		}
		break;
	}
	case SHOAL_CHAT_TOOLS_NONE:
		break;
	}
	return o;
}

static char *trimmed(const char *s, size_t n)
{
	while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		n--;
	return dup_n(s, n);
}

shoal_err shoal_tool_parse(shoal_chat_tools syn, const char *text, size_t len, shoal_tool_parsed *p)
{
	memset(p, 0, sizeof *p);
	if (!text)
		text = "", len = 0;
	size_t skip = 0;
	const char *o = opener(syn, text, len, &skip);
	tc_res r = R_OK;
	if (o) {
		if (!(p->calls = calloc(SHOAL_TOOL_MAX_CALLS, sizeof *p->calls)))
			return SHOAL_ERR_NOMEM;
		tc_cur c = {o + skip, text + len};
		switch (syn) {
		case SHOAL_CHAT_TOOLS_HERMES:
			r = read_hermes(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_LLAMA31:
			r = read_llama31(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_MISTRAL:
			r = read_mistral(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_DEEPSEEK:
			r = read_deepseek(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_GLM:
			r = read_glm(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_HARMONY:
			r = read_harmony(&c, p);
			break;
		case SHOAL_CHAT_TOOLS_NONE:
			break;
		}
	}
	p->state = !o               ? SHOAL_TOOL_NONE
	           : r == R_OK      ? SHOAL_TOOL_DONE
	           : r == R_PARTIAL ? SHOAL_TOOL_PARTIAL
	                            : SHOAL_TOOL_BAD;
	if (p->state == SHOAL_TOOL_DONE) {
		p->content = trimmed(text, (size_t)(o - text));
	} else {
		for (size_t i = 0; i < p->n_calls; i++) {
			free(p->calls[i].name);
			free(p->calls[i].arguments);
			free(p->calls[i].id);
		}
		p->n_calls = 0;
		p->content = dup_n(text, len);
	}
	if (!p->content) {
		shoal_tool_parsed_fini(p);
		return SHOAL_ERR_NOMEM;
	}
	return SHOAL_OK;
}

void shoal_tool_parsed_fini(shoal_tool_parsed *p)
{
	for (size_t i = 0; i < p->n_calls; i++) {
		free(p->calls[i].name);
		free(p->calls[i].arguments);
		free(p->calls[i].id);
	}
	free(p->calls);
	free(p->content);
	memset(p, 0, sizeof *p);
}

size_t shoal_tool_hold(shoal_chat_tools syn, const char *text, size_t len)
{
	size_t skip;
	const char *o = opener(syn, text, len, &skip);
	if (o)
		return (size_t)(o - text);
	const char *tag = syn == SHOAL_CHAT_TOOLS_HERMES || syn == SHOAL_CHAT_TOOLS_GLM
	                      ? "<tool_call>"
	                  : syn == SHOAL_CHAT_TOOLS_MISTRAL  ? "[TOOL_CALLS]"
	                  : syn == SHOAL_CHAT_TOOLS_DEEPSEEK ? DS_CALLS_BEGIN
	                  : syn == SHOAL_CHAT_TOOLS_LLAMA31  ? "<|python_tag|>"
	                  : syn == SHOAL_CHAT_TOOLS_HARMONY  ? "<|channel|>"
	                                                     : NULL;
	if (!tag)
		return len;
	if (syn == SHOAL_CHAT_TOOLS_LLAMA31) {
		/* a reply of only white space may still open with "{" */
		tc_cur c = {text, text + len};
		skip_ws(&c);
		if (c.p == c.end || take(&c, tag) == 2)
			return 0;
		return len;
	}
	/* the longest tail that begins the tag */
	size_t n = strlen(tag);
	for (size_t l = n - 1; l > 0; l--)
		if (l <= len && !memcmp(text + len - l, tag, l))
			return len - l;
	return len;
}
