/*
 * models/chat_json.c: the output buffer of the tool renderers and the
 * templates' `tojson` as transformers defines it (Python's json.dumps,
 * ensure_ascii off), inline or indented.
 *
 * Part: models/ (chat; models/chat_impl.h declares what is shared).
 */
#include "models/chat_impl.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ------------------------------------------------------------------ buffer */

void chat__put(chat_out *b, const char *s, size_t n)
{
	if (b->oom || n == 0)
		return;
	if (n > SIZE_MAX - 1 - b->len) {
		b->oom = true;
		return;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
		char *p = realloc(b->p, cap);
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

void chat__puts(chat_out *b, const char *s)
{
	chat__put(b, s, strlen(s));
}

/* A string as Python's json.dumps quotes it (ensure_ascii off: UTF-8 as
 * is; control characters as \n-style or \u00xx, lower-case hex). */
void chat__json_string(chat_out *b, const char *s, size_t n)
{
	chat__put(b, "\"", 1);
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
			chat__puts(b, e);
		else
			chat__put(b, s + i, 1);
	}
	chat__put(b, "\"", 1);
}

/* Python's repr of a float: the fewest significant digits that read back
 * the same, positional for exponents in [-4, 16), else d.ddde+XX. */
static void tj_real(chat_out *b, double v)
{
	char s[48], o[64];
	if (!isfinite(v)) { /* not JSON; jansson never gives one */
		chat__puts(b, v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
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
	chat__put(b, o, w < sizeof o ? w : sizeof o - 1);
}

/* With indent: a new line and indent * depth spaces (json.dumps(indent=N)). */
static void tj_newline(chat_out *b, unsigned indent, unsigned depth)
{
	if (!indent)
		return;
	chat__put(b, "\n", 1);
	for (unsigned i = 0; i < indent * depth; i++)
		chat__put(b, " ", 1);
}

static void tj_value(chat_out *b, const json_t *v, unsigned indent, unsigned depth)
{
	if (depth > 64) { /* jansson's parser stops at 2048; templates see far less */
		b->oom = true;
		return;
	}
	char s[32];
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		chat__put(b, "{", 1);
		const char *k;
		json_t *x;
		bool first = true;
		json_object_foreach((json_t *)v, k, x)
		{
			if (!first)
				chat__puts(b, indent ? "," : ", ");
			first = false;
			tj_newline(b, indent, depth + 1);
			chat__json_string(b, k, strlen(k));
			chat__put(b, ": ", 2);
			tj_value(b, x, indent, depth + 1);
		}
		if (!first)
			tj_newline(b, indent, depth);
		chat__put(b, "}", 1);
		break;
	}
	case JSON_ARRAY:
		chat__put(b, "[", 1);
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i)
				chat__puts(b, indent ? "," : ", ");
			tj_newline(b, indent, depth + 1);
			tj_value(b, json_array_get(v, i), indent, depth + 1);
		}
		if (json_array_size(v))
			tj_newline(b, indent, depth);
		chat__put(b, "]", 1);
		break;
	case JSON_STRING:
		chat__json_string(b, json_string_value(v), json_string_length(v));
		break;
	case JSON_INTEGER:
		snprintf(s, sizeof s, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		chat__puts(b, s);
		break;
	case JSON_REAL:
		tj_real(b, json_real_value(v));
		break;
	case JSON_TRUE:
		chat__puts(b, "true");
		break;
	case JSON_FALSE:
		chat__puts(b, "false");
		break;
	case JSON_NULL:
		chat__puts(b, "null");
		break;
	}
}

char *chat__tojson_value(const json_t *v, unsigned indent)
{
	chat_out b = {0};
	tj_value(&b, v, indent, 0);
	if (!b.oom && !b.p)
		chat__puts(&b, "");
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
	char *s = chat__tojson_value(v, 0);
	json_decref(v);
	return s;
}
