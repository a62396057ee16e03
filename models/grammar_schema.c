/*
 * models/grammar_schema.c: JSON Schema (a subset), any JSON object and
 * forced tool calls compiled to grammar programs (models/grammar.h).
 *
 * Part: models/. Input comes from clients: every refusal is
 * UNSUPPORTED or FORMAT with a reason naming the keyword and its place
 * (a JSON pointer into the schema). Output is canonical and compact: the
 * schema's property order, no whitespace, so that a tiny model cannot
 * wander into endless spaces and a replay sees the same program.
 *
 * Divisions: the builder; any JSON; schemas; tool calls.
 */
#include "models/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "models/ds_tokens.h"
#include "models/grammar_impl.h"

/* ---- the builder ------------------------------------------------------------ */

typedef struct gbuf {
	uint32_t *v;
	size_t n, cap;
} gbuf;

typedef struct gb {
	gbuf nodes, aux, bytes; /* bytes: one byte per element (simple, small) */
	uint32_t any;           /* the any-value node, or NONE before it is made */
	shoal_err err;
	char *why;
	size_t why_len;
} gb;

static bool grow(gb *b, gbuf *g, size_t more)
{
	if (b->err)
		return false;
	if (g->n + more > SHOAL_GRAMMAR_MAX_WORDS * 4u) {
		b->err =
		    shoal_why(b->why, b->why_len, SHOAL_ERR_RANGE,
		              "the schema makes a grammar over %u words", SHOAL_GRAMMAR_MAX_WORDS);
		return false;
	}
	if (g->n + more > g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 64;
		while (cap < g->n + more)
			cap *= 2;
		uint32_t *v = realloc(g->v, cap * sizeof *v);
		if (!v) {
			b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_NOMEM, "out of memory");
			return false;
		}
		g->v = v;
		g->cap = cap;
	}
	return true;
}

static uint32_t new_node(gb *b, uint32_t kind, uint32_t x, uint32_t y, uint32_t z)
{
	if (b->nodes.n / 6 >= UINT16_MAX) {
		b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_RANGE, "the schema is too large");
		return GRAMMAR__NONE;
	}
	if (!grow(b, &b->nodes, 6))
		return GRAMMAR__NONE;
	uint32_t *p = b->nodes.v + b->nodes.n;
	p[0] = kind, p[1] = 0, p[2] = 0, p[3] = x, p[4] = y, p[5] = z;
	b->nodes.n += 6;
	return (uint32_t)(b->nodes.n / 6 - 1);
}

static uint32_t *node(gb *b, uint32_t i)
{
	return b->nodes.v + 6u * i;
}

/* Reserve n operand words for node i's count items (its n and off). */
static uint32_t *operands(gb *b, uint32_t i, uint32_t n, uint32_t count)
{
	if (i == GRAMMAR__NONE || !grow(b, &b->aux, n ? n : 1))
		return NULL;
	node(b, i)[1] = count;
	node(b, i)[2] = (uint32_t)b->aux.n;
	b->aux.n += n;
	memset(b->aux.v + b->aux.n - n, 0, n * sizeof(uint32_t));
	return b->aux.v + b->aux.n - n;
}

static uint32_t add_bytes(gb *b, const char *s, size_t len)
{
	if (!grow(b, &b->bytes, len))
		return 0;
	uint32_t off = (uint32_t)b->bytes.n;
	for (size_t i = 0; i < len; i++)
		b->bytes.v[b->bytes.n++] = (uint8_t)s[i];
	return off;
}

/* LITS of n strings, with continuations conts (NULL: none). */
static uint32_t lits(gb *b, const char *const *s, const uint32_t *conts, uint32_t n)
{
	uint32_t i = new_node(b, GRAMMAR__LITS, 0, 0, 0);
	if (!operands(b, i, 3 * n, n))
		return GRAMMAR__NONE;
	uint32_t off = node(b, i)[2];
	for (uint32_t j = 0; j < n; j++) {
		uint32_t boff = add_bytes(b, s[j], strlen(s[j]));
		if (b->err)
			return GRAMMAR__NONE;
		uint32_t *l = b->aux.v + off + 3 * j;
		l[0] = boff, l[1] = (uint32_t)strlen(s[j]), l[2] = conts ? conts[j] : GRAMMAR__NONE;
	}
	return i;
}

static uint32_t lit(gb *b, const char *s)
{
	return lits(b, &s, NULL, 1);
}

static uint32_t list(gb *b, uint32_t kind, const uint32_t *ids, uint32_t n)
{
	uint32_t i = new_node(b, kind, 0, 0, 0);
	uint32_t *a = operands(b, i, n, n);
	if (!a)
		return GRAMMAR__NONE;
	for (uint32_t j = 0; j < n; j++)
		if ((a[j] = ids[j]) == GRAMMAR__NONE)
			return GRAMMAR__NONE;
	return i;
}

static shoal_err finish(gb *b, uint32_t root, uint32_t flags, shoal_grammar_prog *out)
{
	if (!b->err && root == GRAMMAR__NONE)
		b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_INVAL, "empty grammar");
	size_t nn = b->nodes.n / 6,
	       total = GRAMMAR__HDR + b->nodes.n + b->aux.n + (b->bytes.n + 3) / 4;
	if (!b->err && total > SHOAL_GRAMMAR_MAX_WORDS)
		b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_RANGE,
		                   "the grammar takes %zu words, at most %u", total,
		                   SHOAL_GRAMMAR_MAX_WORDS);
	uint32_t *w = b->err ? NULL : calloc(total, sizeof *w);
	if (!b->err && !w)
		b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_NOMEM, "out of memory");
	if (!b->err) {
		w[0] = GRAMMAR__MAGIC, w[1] = (uint32_t)nn, w[2] = root;
		w[3] = (uint32_t)b->aux.n, w[4] = (uint32_t)b->bytes.n, w[5] = flags;
		memcpy(w + GRAMMAR__HDR, b->nodes.v, b->nodes.n * 4);
		if (b->aux.n) /* a schema of one scalar has no operands: aux.v NULL */
			memcpy(w + GRAMMAR__HDR + b->nodes.n, b->aux.v, b->aux.n * 4);
		uint8_t *p = (uint8_t *)(w + GRAMMAR__HDR + b->nodes.n + b->aux.n);
		for (size_t i = 0; i < b->bytes.n; i++)
			p[i] = (uint8_t)b->bytes.v[i];
		out->w = w;
		out->n = (uint32_t)total;
	}
	free(b->nodes.v);
	free(b->aux.v);
	free(b->bytes.v);
	return b->err;
}

/* ---- any JSON ------------------------------------------------------------------ */

/* One node for any JSON value (made once): ALT of an object with any
 * keys, an array, a string, a number, true/false/null. */
static uint32_t any_value(gb *b)
{
	if (b->any != GRAMMAR__NONE)
		return b->any;
	uint32_t alt = new_node(b, GRAMMAR__ALT, 0, 0, 0);
	b->any = alt;
	uint32_t str = new_node(b, GRAMMAR__STRING, 0, GRAMMAR__NONE, 0);
	static const char *const words[] = {"true", "false", "null"};
	uint32_t br[5] = {new_node(b, GRAMMAR__OBJECT, 1, str, alt),
	                  new_node(b, GRAMMAR__ARRAY, 0, GRAMMAR__NONE, alt), str,
	                  new_node(b, GRAMMAR__NUMBER, 0, 0, 0), lits(b, words, NULL, 3)};
	uint32_t *a = operands(b, alt, 5, 5);
	if (!a)
		return GRAMMAR__NONE;
	memcpy(a, br, sizeof br);
	return alt;
}

static void gb_init(gb *b, char *why, size_t why_len)
{
	memset(b, 0, sizeof *b);
	b->any = GRAMMAR__NONE;
	b->why = why;
	b->why_len = why_len;
}

shoal_err shoal_grammar_json_object(shoal_grammar_prog *out, char *why, size_t why_len)
{
	gb b;
	gb_init(&b, why, why_len);
	uint32_t v = any_value(&b);
	uint32_t str = b.err ? 0 : b.aux.v[node(&b, v)[2] + 2];
	uint32_t root = b.err ? GRAMMAR__NONE : new_node(&b, GRAMMAR__OBJECT, 1, str, v);
	return finish(&b, root, 0, out);
}

/* ---- schemas ------------------------------------------------------------------- */

static uint32_t schema(gb *b, json_t *s, const char *path, uint32_t depth);

static uint32_t refuse(gb *b, shoal_err e, const char *fmt, const char *a, const char *path)
{
	if (!b->err) {
		char msg[SHOAL_WHY_LEN];
		snprintf(msg, sizeof msg, fmt, a);
		b->err =
		    shoal_why(b->why, b->why_len, e, "%s (at '%s')", msg, path[0] ? path : "/");
	}
	return GRAMMAR__NONE;
}

/* The bytes each node may begin with (for anyOf's branches). */
static void first_set(gb *b, uint32_t i, bool set[256], uint32_t guard)
{
	if (i == GRAMMAR__NONE || guard > 64)
		return;
	uint32_t *d = node(b, i), *a = b->aux.v ? b->aux.v + d[2] : NULL; /* NULL: n is 0 */
	switch (d[0]) {
	case GRAMMAR__LITS:
		for (uint32_t j = 0; j < d[1]; j++)
			if (a[3 * j + 1])
				set[b->bytes.v[a[3 * j]] & 0xff] = true;
		break;
	case GRAMMAR__STRING:
		set['"'] = true;
		break;
	case GRAMMAR__NUMBER:
		set['-'] = true;
		for (int c = '0'; c <= '9'; c++)
			set[c] = true;
		break;
	case GRAMMAR__ARRAY:
		set['['] = true;
		break;
	case GRAMMAR__OBJECT:
		set['{'] = true;
		break;
	case GRAMMAR__ALT:
		for (uint32_t j = 0; j < d[1]; j++)
			first_set(b, a[j], set, guard + 1);
		break;
	case GRAMMAR__SEQ:
		if (d[1])
			first_set(b, a[0], set, guard + 1);
		break;
	}
}

/* ALT of branches[n]: refused when two may begin with the same byte. */
static uint32_t alt_of(gb *b, const uint32_t *br, uint32_t n, const char *what, const char *path)
{
	if (b->err)
		return GRAMMAR__NONE;
	if (n == 1)
		return br[0];
	bool seen[256] = {false};
	for (uint32_t j = 0; j < n; j++) {
		bool s[256] = {false};
		first_set(b, br[j], s, 0);
		for (int c = 0; c < 256; c++) {
			if (s[c] && seen[c])
				return refuse(
				    b, SHOAL_ERR_UNSUPPORTED,
				    "'%s' with two branches of the same type (e.g. two objects) "
				    "is not supported",
				    what, path);
			seen[c] |= s[c];
		}
	}
	return list(b, GRAMMAR__ALT, br, n);
}

static bool count_field(gb *b, json_t *s, const char *key, uint32_t *v, const char *path)
{
	json_t *x = json_object_get(s, key);
	if (!x)
		return true;
	if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 1000000) {
		refuse(b, SHOAL_ERR_FORMAT, "'%s' must be a whole number in [0, 1000000]", key,
		       path);
		return false;
	}
	*v = (uint32_t)json_integer_value(x);
	return true;
}

static uint32_t enum_of(gb *b, json_t *vals, const char *path)
{
	size_t n = json_array_size(vals);
	if (!json_is_array(vals) || !n || n > 4096)
		return refuse(b, SHOAL_ERR_FORMAT, "'%s' must be a non-empty array (at most 4096)",
		              "enum", path);
	char **s = calloc(n, sizeof *s);
	uint32_t r = GRAMMAR__NONE;
	size_t k = 0;
	for (size_t i = 0; s && i < n; i++) {
		s[k] = json_dumps(json_array_get(vals, i), JSON_COMPACT | JSON_ENCODE_ANY);
		if (!s[k])
			goto out;
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = !strcmp(s[j], s[k]);
		if (dup) {
			free(s[k]);
			s[k] = NULL;
		} else
			k++;
	}
	if (s)
		r = lits(b, (const char *const *)s, NULL, (uint32_t)k);
out:
	for (size_t i = 0; s && i < n; i++)
		free(s[i]);
	free(s);
	return r;
}

static uint32_t object_of(gb *b, json_t *s, const char *path, uint32_t depth)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	json_t *add = json_object_get(s, "additionalProperties");
	if (props && !json_is_object(props))
		return refuse(b, SHOAL_ERR_FORMAT, "'%s' must be an object", "properties", path);
	if (req && !json_is_array(req))
		return refuse(b, SHOAL_ERR_FORMAT, "'%s' must be an array of names", "required",
		              path);
	if (add && !json_is_boolean(add) && !(json_is_object(add) && !json_object_size(add)))
		return refuse(b, SHOAL_ERR_UNSUPPORTED,
		              "'%s' as a schema is not supported (true or false only)",
		              "additionalProperties", path);
	size_t i;
	json_t *r;
	json_array_foreach(
	    req, i,
	    r) if (!json_is_string(r) ||
	           !json_object_get(
	               props, json_string_value(r))) return refuse(b, SHOAL_ERR_UNSUPPORTED,
	                                                           "'%s' names a property that "
	                                                           "'properties' does not define",
	                                                           "required", path);
	if (!json_object_size(props) && !json_is_false(add)) {
		uint32_t v = any_value(b);
		if (b->err)
			return GRAMMAR__NONE;
		return new_node(b, GRAMMAR__OBJECT, 1, b->aux.v[node(b, v)[2] + 2], v);
	}
	uint32_t n = (uint32_t)json_object_size(props);
	uint32_t *child = calloc(n ? n : 1, sizeof *child), k = 0;
	if (!child)
		return refuse(b, SHOAL_ERR_NOMEM, "%s", "out of memory", path);
	const char *key;
	json_t *v;
	json_object_foreach(props, key, v)
	{
		char sub[512];
		snprintf(sub, sizeof sub, "%s/properties/%s", path, key);
		child[k++] = schema(b, v, sub, depth + 1);
	}
	uint32_t o = new_node(b, GRAMMAR__OBJECT, 0, 0, 0);
	uint32_t *a = operands(b, o, 4 * n, n);
	k = 0;
	json_object_foreach(a ? props : NULL, key, v)
	{
		json_t *ks = json_string(key);
		char *q = ks ? json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
		json_decref(ks);
		if (!q)
			break;
		size_t ql = strlen(q);
		uint32_t off = add_bytes(b, q, ql);
		off = b->err ? 0 : (add_bytes(b, ":", 1), off);
		free(q);
		bool required = false;
		json_array_foreach(req, i, r) required |= !strcmp(json_string_value(r), key);
		uint32_t *p = b->aux.v + node(b, o)[2] + 4 * k;
		p[0] = off, p[1] = (uint32_t)ql + 1, p[2] = child[k], p[3] = required;
		if (child[k++] == GRAMMAR__NONE)
			o = GRAMMAR__NONE;
	}
	free(child);
	return b->err ? GRAMMAR__NONE : o;
}

static uint32_t typed(gb *b, json_t *s, const char *t, const char *path, uint32_t depth)
{
	static const char *const bools[] = {"true", "false"};
	if (!strcmp(t, "object"))
		return object_of(b, s, path, depth);
	if (!strcmp(t, "array")) {
		uint32_t lo = 0, hi = GRAMMAR__NONE;
		if (!count_field(b, s, "minItems", &lo, path) ||
		    !count_field(b, s, "maxItems", &hi, path))
			return GRAMMAR__NONE;
		if (lo > hi)
			return refuse(b, SHOAL_ERR_FORMAT, "'%s' exceeds maxItems", "minItems",
			              path);
		json_t *it = json_object_get(s, "items");
		char sub[512];
		snprintf(sub, sizeof sub, "%s/items", path);
		uint32_t item = it ? schema(b, it, sub, depth + 1) : any_value(b);
		return item == GRAMMAR__NONE ? GRAMMAR__NONE
		                             : new_node(b, GRAMMAR__ARRAY, lo, hi, item);
	}
	if (!strcmp(t, "string")) {
		uint32_t lo = 0, hi = GRAMMAR__NONE;
		if (!count_field(b, s, "minLength", &lo, path) ||
		    !count_field(b, s, "maxLength", &hi, path))
			return GRAMMAR__NONE;
		if (lo > hi)
			return refuse(b, SHOAL_ERR_FORMAT, "'%s' exceeds maxLength", "minLength",
			              path);
		return new_node(b, GRAMMAR__STRING, lo, hi, 0);
	}
	if (!strcmp(t, "number") || !strcmp(t, "integer"))
		return new_node(b, GRAMMAR__NUMBER, !strcmp(t, "integer"), 0, 0);
	if (!strcmp(t, "boolean"))
		return lits(b, bools, NULL, 2);
	if (!strcmp(t, "null"))
		return lit(b, "null");
	return refuse(b, SHOAL_ERR_UNSUPPORTED, "type '%s' is not a JSON Schema type", t, path);
}

/* Keywords read (the rest refused), and annotations ignored. */
static const char *const known[] = {
    "type",      "properties",  "required", "additionalProperties",
    "items",     "minItems",    "maxItems", "minLength",
    "maxLength", "enum",        "const",    "anyOf",
    "title",     "description", "$schema",  "$id",
    "$comment",  "default",     "examples", NULL,
};

static uint32_t schema(gb *b, json_t *s, const char *path, uint32_t depth)
{
	if (b->err)
		return GRAMMAR__NONE;
	if (depth > SHOAL_GRAMMAR_MAX_NEST)
		return refuse(b, SHOAL_ERR_UNSUPPORTED, "nesting deeper than %s levels", "16",
		              path);
	if (json_is_true(s))
		return any_value(b);
	if (!json_is_object(s))
		return refuse(b, SHOAL_ERR_FORMAT, "%s", "a schema must be an object", path);
	const char *key;
	json_t *v;
	json_object_foreach(s, key, v)
	{
		bool ok = false;
		for (size_t i = 0; known[i] && !ok; i++)
			ok = !strcmp(known[i], key);
		if (!ok)
			return refuse(b, SHOAL_ERR_UNSUPPORTED, "keyword '%s' is not supported",
			              key, path);
	}
	if ((v = json_object_get(s, "const"))) {
		json_t *one = json_pack("[O]", v);
		uint32_t r = one ? enum_of(b, one, path) : GRAMMAR__NONE;
		json_decref(one);
		return r;
	}
	if ((v = json_object_get(s, "enum")))
		return enum_of(b, v, path);
	if ((v = json_object_get(s, "anyOf"))) {
		size_t n = json_array_size(v);
		if (!json_is_array(v) || !n || n > 16)
			return refuse(b, SHOAL_ERR_FORMAT,
			              "'%s' must be an array of 1 to 16 schemas", "anyOf", path);
		uint32_t br[16];
		for (size_t i = 0; i < n; i++) {
			char sub[512];
			snprintf(sub, sizeof sub, "%s/anyOf/%zu", path, i);
			br[i] = schema(b, json_array_get(v, i), sub, depth + 1);
		}
		return alt_of(b, br, (uint32_t)n, "anyOf", path);
	}
	json_t *t = json_object_get(s, "type");
	if (json_is_string(t))
		return typed(b, s, json_string_value(t), path, depth);
	if (json_is_array(t) && json_array_size(t) && json_array_size(t) <= 7) {
		uint32_t br[7];
		size_t n = json_array_size(t);
		for (size_t i = 0; i < n; i++) {
			json_t *ti = json_array_get(t, i);
			if (!json_is_string(ti))
				return refuse(b, SHOAL_ERR_FORMAT, "'%s' must hold type names",
				              "type", path);
			br[i] = typed(b, s, json_string_value(ti), path, depth);
		}
		return alt_of(b, br, (uint32_t)n, "type", path);
	}
	if (t)
		return refuse(b, SHOAL_ERR_FORMAT, "'%s' must be a type name or a list of them",
		              "type", path);
	if (json_object_get(s, "properties"))
		return typed(b, s, "object", path, depth);
	if (json_object_get(s, "items"))
		return typed(b, s, "array", path, depth);
	return any_value(b);
}

static uint32_t schema_node(gb *b, const char *text, size_t len, const char *what)
{
	json_error_t je;
	json_t *s = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!s) {
		b->err = shoal_why(b->why, b->why_len, SHOAL_ERR_FORMAT, "%s is not JSON: %s", what,
		                   je.text);
		return GRAMMAR__NONE;
	}
	uint32_t r = schema(b, s, "", 0);
	json_decref(s);
	return r;
}

shoal_err shoal_grammar_schema(const char *schema_json, size_t len, shoal_grammar_prog *out,
                               char *why, size_t why_len)
{
	gb b;
	gb_init(&b, why, why_len);
	uint32_t root = schema_node(&b, schema_json, len, "the schema");
	return finish(&b, root, 0, out);
}

/* ---- tool calls ----------------------------------------------------------------- */

#define DS(s) "<" DS_BAR s DS_BAR ">"

/* Per syntax: before the name, around the name, between name and
 * arguments, after the arguments (see models/tool_call.c's readers). */
typedef struct tool_form {
	const char *pre, *mid, *post;
	bool quoted; /* the name as a JSON string */
} tool_form;

static const tool_form forms[] = {
    [SHOAL_CHAT_TOOLS_HERMES] = {"<tool_call>\n{\"name\":", ",\"arguments\":", "}\n</tool_call>",
                                 true},
    [SHOAL_CHAT_TOOLS_LLAMA31] = {"{\"name\":", ",\"parameters\":", "}", true},
    [SHOAL_CHAT_TOOLS_MISTRAL] = {"[TOOL_CALLS][{\"name\":", ",\"arguments\":", "}]", true},
    [SHOAL_CHAT_TOOLS_DEEPSEEK] = {DS("tool" DS_SP "calls" DS_SP "begin")
                                       DS("tool" DS_SP "call" DS_SP "begin"),
                                   DS("tool" DS_SP "sep"),
                                   DS("tool" DS_SP "call" DS_SP "end")
                                       DS("tool" DS_SP "calls" DS_SP "end"),
                                   false},
};

shoal_err shoal_grammar_tools(shoal_chat_tools syn, const char *tools_json, const char *name,
                              shoal_grammar_prog *out, char *why, size_t why_len)
{
	/* GLM's calls are not JSON, gpt-oss's name the function outside it:
	 * no form for them yet */
	if (syn == SHOAL_CHAT_TOOLS_GLM || syn == SHOAL_CHAT_TOOLS_HARMONY)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "a forced call (tool_choice required or a named function) is "
		                 "not supported for %s's tool syntax yet; use tool_choice auto",
		                 syn == SHOAL_CHAT_TOOLS_GLM ? "GLM" : "gpt-oss");
	if (syn <= SHOAL_CHAT_TOOLS_NONE || syn > SHOAL_CHAT_TOOLS_DEEPSEEK)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "the model's chat format has no tool syntax");
	const tool_form *f = &forms[syn];
	json_error_t je;
	json_t *tools = json_loads(tools_json ? tools_json : "", 0, &je);
	if (!json_is_array(tools) || !json_array_size(tools)) {
		json_decref(tools);
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "'tools' must be a non-empty array");
	}
	gb b;
	gb_init(&b, why, why_len);
	size_t n = json_array_size(tools), k = 0;
	char **names = calloc(n, sizeof *names);
	uint32_t *conts = calloc(n, sizeof *conts);
	if (!names || !conts)
		b.err = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	for (size_t i = 0; !b.err && i < n; i++) {
		json_t *fn = json_object_get(json_array_get(tools, i), "function");
		json_t *nm = json_object_get(fn, "name"),
		       *params = json_object_get(fn, "parameters");
		if (!json_is_string(nm)) {
			b.err = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                  "tools[%zu].function.name must be a string", i);
			break;
		}
		if (name && strcmp(name, json_string_value(nm)))
			continue;
		char path[96];
		snprintf(path, sizeof path, "/tools/%zu/function/parameters", i);
		uint32_t args = params ? schema(&b, params, path, 0) : GRAMMAR__NONE;
		if (!params) {
			json_t *empty = json_pack("{s:s}", "type", "object");
			args = schema(&b, empty, path, 0);
			json_decref(empty);
		}
		uint32_t parts[3] = {f->mid[0] && f->quoted ? lit(&b, f->mid) : args,
		                     f->mid[0] && f->quoted ? args : lit(&b, f->post),
		                     f->quoted ? lit(&b, f->post) : GRAMMAR__NONE};
		conts[k] = list(&b, GRAMMAR__SEQ, parts, f->quoted ? 3 : 2);
		json_t *js = json_string(json_string_value(nm));
		char *q = js && f->quoted ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
		json_decref(js);
		size_t ql = f->quoted ? (q ? strlen(q) : 0) : strlen(json_string_value(nm));
		names[k] = malloc(ql + strlen(f->mid) + 1);
		if (!names[k] || (f->quoted && !q)) {
			free(q);
			b.err = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
			break;
		}
		/* unquoted (DeepSeek): the separator ends the name's literal */
		snprintf(names[k], ql + strlen(f->mid) + 1, "%s%s",
		         f->quoted ? q : json_string_value(nm), f->quoted ? "" : f->mid);
		free(q);
		k++;
	}
	if (!b.err && !k)
		b.err = shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                  "tool_choice names '%s', which 'tools' does not define",
		                  name ? name : "");
	uint32_t root = GRAMMAR__NONE;
	if (!b.err) {
		uint32_t seq[2] = {lit(&b, f->pre),
		                   lits(&b, (const char *const *)names, conts, (uint32_t)k)};
		root = list(&b, GRAMMAR__SEQ, seq, 2);
	}
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	free(conts);
	json_decref(tools);
	return finish(&b, root, syn == SHOAL_CHAT_TOOLS_HERMES ? 0 : SHOAL_GRAMMAR_SPECIAL, out);
}
