/*
 * models/tool_call.h: a model's reply read back as function calls, in the
 * tool syntax of its chat format (shoal_chat_tools, models/chat.h).
 *
 * Part: models/. A pure function of the text: any bytes give a result
 * (tests/fuzz/fuzz_tool_call.c). Special tokens must be in the text (the
 * detokenizer's special mode) for the syntaxes that use them.
 */
#ifndef SHOAL_MODELS_TOOL_CALL_H
#define SHOAL_MODELS_TOOL_CALL_H

#include <stddef.h>

#include "base/err.h"
#include "models/chat.h"

#define SHOAL_TOOL_MAX_CALLS 64 /* calls read from one reply; more: BAD */

typedef enum shoal_tool_state {
	SHOAL_TOOL_NONE = 0, /* no call syntax in the text: it is all content */
	SHOAL_TOOL_DONE,     /* calls[n_calls], each whole and checked */
	SHOAL_TOOL_PARTIAL,  /* a call begins but the text ends inside it */
	SHOAL_TOOL_BAD,      /* a call begins but is not well formed (why) */
} shoal_tool_state;

typedef struct shoal_tool_call {
	char *name;      /* malloc'd */
	char *arguments; /* malloc'd: the arguments object as compact JSON */
	char *id;        /* malloc'd id the model gave (Mistral), or NULL */
} shoal_tool_call;

typedef struct shoal_tool_parsed {
	shoal_tool_state state;
	char *content; /* malloc'd: the text outside the calls, trimmed (DONE), or
	                  the whole text (other states) */
	shoal_tool_call *calls;
	size_t n_calls;
	char why[160]; /* BAD: what is wrong */
} shoal_tool_parsed;

/* Read text[len] as a reply in syntax `syn`. SHOAL_OK with *p filled
 * (free with shoal_tool_parsed_fini), or NOMEM. */
shoal_err shoal_tool_parse(shoal_chat_tools syn, const char *text, size_t len,
                           shoal_tool_parsed *p);
void shoal_tool_parsed_fini(shoal_tool_parsed *p);

/* While a reply streams: the offset from which text[len] may still be (or
 * become, as more text comes) a call, which must be held back; len when
 * none. */
size_t shoal_tool_hold(shoal_chat_tools syn, const char *text, size_t len);

#endif
