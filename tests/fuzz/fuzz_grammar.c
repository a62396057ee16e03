/*
 * tests/fuzz/fuzz_grammar.c: libFuzzer target for the schema-to-grammar
 * compiler and the matcher (models/grammar_schema.c, models/grammar.c).
 * The first byte picks what the rest is:
 *   0-3  a JSON Schema, then after a NUL a document to match;
 *   4    a tools array (the second byte picks the tool syntax), then after
 *        a NUL a reply to match;
 *   5-   a program's words as they come off the wire (dist_proto.c checks
 *        them with shoal_grammar_check), then matched against themselves.
 * Invariants: a compiled program passes the check and is at most
 * SHOAL_GRAMMAR_MAX_WORDS; a refusal leaves no program; matching never
 * reads outside the program (ASan) and ends; a schema's document that the
 * matcher takes as whole is JSON (jansson reads it).
 *
 *   make fuzz FUZZ_TARGETS=grammar
 *   tests/fuzz/fuzz_grammar -max_total_time=60 [CORPUS]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "models/grammar.h"

static void run(const uint32_t *w, const uint8_t *doc, size_t n, bool is_json)
{
	shoal_grammar_state st;
	shoal_grammar_start(w, &st);
	bool ok = shoal_grammar_feed(w, &st, doc, n);
	bool first[256];
	shoal_grammar_first(w, &st, first);
	if (ok && shoal_grammar_done(w, &st) && is_json) {
		json_t *j =
		    json_loadb((const char *)doc, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
		if (!j)
			abort();
		json_decref(j);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint8_t mode = data[0];
	char why[256];
	if (mode >= 5) {
		size_t nw = (size - 1) / 4;
		uint32_t *w = malloc(nw ? nw * 4 : 4);
		if (!w)
			return 0;
		memcpy(w, data + 1, nw * 4);
		if (shoal_grammar_check(w, (uint32_t)(nw > UINT32_MAX ? 0 : nw), why, sizeof why) ==
		    SHOAL_OK)
			run(w, data + 1, size - 1, false);
		free(w);
		return 0;
	}
	const uint8_t *p = data + (mode == 4 ? 2 : 1), *end = data + size;
	if (p > end)
		return 0;
	const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
	size_t tlen = nul ? (size_t)(nul - p) : (size_t)(end - p);
	char *text = malloc(tlen + 1);
	if (!text)
		return 0;
	memcpy(text, p, tlen);
	text[tlen] = 0;
	shoal_grammar_prog g = {0};
	shoal_err e = mode == 4
	                  ? shoal_grammar_tools((shoal_chat_tools)(data[1] % 6), text,
	                                        data[1] & 0x80 ? "f" : NULL, &g, why, sizeof why)
	                  : shoal_grammar_schema(text, tlen, &g, why, sizeof why);
	free(text);
	if (e) {
		if (g.w)
			abort();
		return 0;
	}
	if (!g.w || g.n > SHOAL_GRAMMAR_MAX_WORDS || shoal_grammar_check(g.w, g.n, why, sizeof why))
		abort();
	const uint8_t *doc = nul ? nul + 1 : end;
	run(g.w, doc, (size_t)(end - doc), mode != 4);
	free(g.w);
	return 0;
}
