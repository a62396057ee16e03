/*
 * models/grammar.h: what a model's reply may look like, as a byte-level
 * pushdown matcher: structured output (a JSON Schema, or any JSON object)
 * and forced tool calls in the model's tool syntax.
 *
 * Part: models/. Both the API (which compiles a request's schema:
 * grammar_schema.c) and the last pipeline stage (which samples under it:
 * runtime/dist/dist_grammar.c) use it, and models/ is the part both may
 * include. A grammar is a flat program of 32-bit words (a header, rule
 * nodes, their operands, a byte pool): the same words are what the run's
 * OPEN message carries, so the stage checks them as untrusted input
 * (shoal_grammar_check) and the matcher never reads outside them.
 *
 * The matcher's state is a fixed-size value (a stack of frames) that
 * depends only on the bytes fed so far: a replay that feeds the same
 * tokens reaches the same state (DESIGN invariant 2).
 */
#ifndef SHOAL_MODELS_GRAMMAR_H
#define SHOAL_MODELS_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/chat.h"

/* Nesting of the matcher's stack: a schema nests at most
 * SHOAL_GRAMMAR_MAX_NEST objects/arrays (each takes a frame for itself and
 * one for its wrapper rule), any-JSON values nest until the stack is full. */
#define SHOAL_GRAMMAR_MAX_DEPTH 48
#define SHOAL_GRAMMAR_MAX_NEST  16
/* A program's words at most (it travels in one OPEN control frame, which
 * must fit a link's smallest max frame, 64 KiB, with room to spare). */
#define SHOAL_GRAMMAR_MAX_WORDS 8192u
/* Digits a number may have in its integer and fraction parts (a double
 * holds 15-17 significant digits; unbounded digits let a model never end). */
#define SHOAL_GRAMMAR_MAX_DIGITS 12u

/* Header word 5, flags: the reply's text shows control tokens (the tool
 * syntaxes of Llama 3.1, Mistral and DeepSeek are made of them). */
#define SHOAL_GRAMMAR_SPECIAL 1u

typedef struct shoal_grammar_frame {
	uint16_t node;
	uint16_t phase;
	uint32_t a, b, c;
} shoal_grammar_frame;

typedef struct shoal_grammar_state {
	uint32_t depth;
	shoal_grammar_frame f[SHOAL_GRAMMAR_MAX_DEPTH];
} shoal_grammar_state;

/* A compiled grammar: its words (malloc'd; free with free()). */
typedef struct shoal_grammar_prog {
	uint32_t *w;
	uint32_t n;
} shoal_grammar_prog;

/* ---- compiling (grammar_schema.c) ---- */

/* Any JSON object (response_format json_object). */
shoal_err shoal_grammar_json_object(shoal_grammar_prog *out, char *why, size_t why_len);

/* A JSON Schema (schema_json: its text). The subset: type (one or a list),
 * properties, required, additionalProperties (true/false), items,
 * minItems, maxItems, minLength, maxLength, enum, const, anyOf whose
 * branches begin with different characters; annotations (title,
 * description, $schema, $id, $comment, default, examples) are ignored.
 * Properties are written in the schema's order, compact (no spaces).
 * Anything else: UNSUPPORTED, why naming the keyword and where it is. */
shoal_err shoal_grammar_schema(const char *schema_json, size_t len, shoal_grammar_prog *out,
                               char *why, size_t why_len);

/* One call of one of the functions in tools_json (OpenAI's tools array),
 * or of the one named `name` (NULL: any), in the tool syntax `syn`, its
 * arguments fitting the function's parameters schema. */
shoal_err shoal_grammar_tools(shoal_chat_tools syn, const char *tools_json, const char *name,
                              shoal_grammar_prog *out, char *why, size_t why_len);

/* ---- matching (grammar.c) ---- */

/* Whether w[n] is a well-formed program (every index in range): FORMAT
 * with why otherwise. The matcher functions below assume it is. */
shoal_err shoal_grammar_check(const uint32_t *w, uint32_t n, char *why, size_t why_len);
uint32_t shoal_grammar_flags(const uint32_t *w);

void shoal_grammar_start(const uint32_t *w, shoal_grammar_state *st);
/* Feed bytes; false: they do not continue a valid reply (st is then
 * undefined: feed a copy to test). */
bool shoal_grammar_feed(const uint32_t *w, shoal_grammar_state *st, const uint8_t *b, size_t n);
/* Whether the reply may end here (the document is whole). */
bool shoal_grammar_done(const uint32_t *w, const shoal_grammar_state *st);
/* How many plain bytes (0x20-0x7e but '"' and '\\') may come next, each
 * one character of a string's body: 0 outside one, UINT32_MAX unbounded.
 * A token of k plain bytes fits iff k <= this (the mask's fast path). */
uint32_t shoal_grammar_plain_room(const uint32_t *w, const shoal_grammar_state *st);

/* first[c] = whether byte c may come next (256 entries). */
void shoal_grammar_first(const uint32_t *w, const shoal_grammar_state *st, bool first[256]);

#endif
