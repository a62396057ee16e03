/*
 * models/chat_impl.h: what the chat files share (models/chat.c,
 * chat_tools.c, chat_tools_fmt.c, chat_json.c). chat.c renders
 * conversations without tools and hands those with tools, calls or "tool"
 * messages to chat_tools.c, which renders the Hermes formats and hands the
 * others to chat_tools_fmt.c.
 *
 * Part: models/.
 */
#ifndef SHOAL_MODELS_CHAT_IMPL_H
#define SHOAL_MODELS_CHAT_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "models/chat.h"
#include "models/ds_tokens.h"

/* Whether a conversation needs the tools renderer: tools given (not "[]"),
 * a "tool" message or an assistant message with calls. */
bool chat__has_tools(const shoal_chat_msg *msgs, size_t n, const shoal_chat_opts *o);

/* shoal_chat_render_opts for such a conversation (n >= 1), in a format
 * with a tool syntax (else UNSUPPORTED, no reason: the caller gives it).
 * Same results and ownership. (chat_tools.c) */
shoal_err chat__render_tools(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                             const shoal_chat_opts *o, char **out, char *why, size_t why_len);

/* ---- chat_json.c: the renderers' output and the templates' tojson */

/* A growing NUL-terminated string; oom sticks once an append failed. */
typedef struct chat_out {
	char *p;
	size_t len, cap;
	bool oom;
} chat_out;

void chat__put(chat_out *b, const char *s, size_t n);
void chat__puts(chat_out *b, const char *s);
/* s (n bytes) as json.dumps quotes a string (ensure_ascii off). */
void chat__json_string(chat_out *b, const char *s, size_t n);

/* Python's json.dumps(v, ensure_ascii=False[, indent=indent]) (what the
 * templates' `tojson` prints under transformers: ", " and ": "
 * separators inline, "," and new lines indented; keys in their order,
 * shortest round-trip floats). malloc'd, or NULL: out of memory. */
char *chat__tojson_value(const json_t *v, unsigned indent);
/* The same of a JSON text; NULL: not JSON (or out of memory). */
char *chat__tojson(const char *json, size_t len);

/* ---- chat_harmony.c: gpt-oss's format without tools, for m[0..n) whose
 * roles chat.c checked (system, user, assistant); SHOAL_OK or a reason. */
shoal_err chat__render_harmony(const shoal_chat_msg *m, size_t n, const shoal_chat_opts *o,
                               chat_out *b, char *why, size_t why_len);

/* ---- chat_tools.c -> chat_tools_fmt.c: a checked conversation with tools */

typedef struct chat_tc {
	const shoal_chat_msg *m;
	size_t n;
	json_t *tools; /* the tools array, NULL: none */
	char **args;   /* per call, in message order: its arguments' tojson */
	size_t *first; /* (n) index of each message's first call in args */
	char *why;
	size_t why_len;
} chat_tc;

/* The formats of chat_tools_fmt.c: SHOAL_OK, or a reason in c->why for a
 * conversation the format cannot express (models/chat.h says which). */
shoal_err chat__tools_llama31(const chat_tc *c, chat_out *b, const shoal_chat_opts *o);
shoal_err chat__tools_mistral(const chat_tc *c, chat_out *b, const shoal_chat_opts *o);
shoal_err chat__tools_deepseek(const chat_tc *c, chat_out *b, const shoal_chat_opts *o);
shoal_err chat__tools_glm(const chat_tc *c, chat_out *b, const shoal_chat_opts *o);
/* gpt-oss's harmony format with tools (chat_harmony.c). */
shoal_err chat__tools_harmony(const chat_tc *c, chat_out *b, const shoal_chat_opts *o);

#endif
