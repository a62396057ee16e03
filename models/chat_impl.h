/*
 * models/chat_impl.h: what the chat files share (models/chat.c,
 * models/chat_tools.c). chat.c renders conversations without tools and
 * hands those with tools, calls or "tool" messages to chat_tools.c.
 *
 * Part: models/.
 */
#ifndef SHOAL_MODELS_CHAT_IMPL_H
#define SHOAL_MODELS_CHAT_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "models/chat.h"

/* Whether a conversation needs the tools renderer: tools given (not "[]"),
 * a "tool" message or an assistant message with calls. */
bool chat__has_tools(const shoal_chat_msg *msgs, size_t n, const shoal_chat_opts *o);

/* shoal_chat_render_opts for such a conversation (n >= 1), in a format
 * whose tool syntax is HERMES (else UNSUPPORTED, no reason: the caller
 * gives it). Same results and ownership. */
shoal_err chat__render_tools(shoal_chat_style s, const shoal_chat_msg *msgs, size_t n,
                             const shoal_chat_opts *o, char **out, char *why, size_t why_len);

/* Python's json.dumps(v, ensure_ascii=False) of a JSON text (what the
 * templates' `tojson` prints under transformers: ", " and ": "
 * separators, keys in their order, shortest round-trip floats).
 * malloc'd, or NULL: not JSON (or out of memory). */
char *chat__tojson(const char *json, size_t len);

#endif
