/*
 * tests/bench/grammar_mask.c: what structured output costs the last stage
 * per token: the grammar's mask over a real vocabulary (the matcher's
 * first-byte table, then whole tokens fed for the rest: the work of
 * runtime/dist/dist_grammar.c's mask), and the one check a kept draw
 * costs, at three points of a document: inside a free string (most tokens
 * fit), after '{' of a schema object (few do), inside a number; the mask
 * with and without the fast path for plain tokens inside a string (which
 * must allow the same tokens: checked).
 *
 *   tests/bench/grammar_mask [VOCAB.gguf] (default: Llama 3's 128k BPE
 *   vocabulary in tests/data/vocab)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/gguf.h"
#include "models/grammar.h"
#include "models/tokenizer.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "tests/data/vocab/ggml-vocab-llama-bpe.gguf";
	char why[256];
	shoal_gguf *g = NULL;
	shoal_tokenizer *tok = NULL;
	if (shoal_gguf_open(path, &g, why, sizeof why) ||
	    shoal_tokenizer_from_gguf(g, &tok, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", path, why);
		return 77;
	}
	uint32_t nv = shoal_tokenizer_n_vocab(tok);
	uint32_t *off = malloc((nv + 1) * sizeof *off);
	uint8_t *bytes = malloc((size_t)nv * 64);
	size_t used = 0;
	for (uint32_t i = 0; i < nv; i++) {
		off[i] = (uint32_t)used;
		size_t n = shoal_tokenizer_piece(tok, (int32_t)i, false, (char *)bytes + used, 64);
		used += n < 64 ? n : 0;
	}
	off[nv] = (uint32_t)used;
	uint8_t *plain = calloc(nv, 1);
	for (uint32_t i = 0; i < nv; i++) {
		plain[i] = off[i + 1] > off[i];
		for (uint32_t j = off[i]; plain[i] && j < off[i + 1]; j++)
			plain[i] = bytes[j] >= 0x20 && bytes[j] < 0x7f && bytes[j] != '"' &&
			           bytes[j] != '\\';
	}
	const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
	                     "\"age\":{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":"
	                     "{\"enum\":[\"a\",\"b\"]}}},\"required\":[\"name\"]}";
	shoal_grammar_prog p = {0};
	if (shoal_grammar_schema(schema, strlen(schema), &p, why, sizeof why)) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	const char *at[3] = {"{\"name\":\"Emma Wood", "{", "{\"name\":\"E\",\"age\":12"};
	const char *label[3] = {"in a free string", "after '{'", "in a number"};
	printf("vocabulary %s: %u tokens\n", path, nv);
	for (int k = 0; k < 3; k++) {
		shoal_grammar_state st;
		shoal_grammar_start(p.w, &st);
		shoal_grammar_feed(p.w, &st, (const uint8_t *)at[k], strlen(at[k]));
		uint32_t allowed = 0, fast = 0;
		int reps = 20;
		double mask_ms[2];
		for (int way = 0; way < 2; way++) { /* 0: every token fed; 1: the plain fast path */
			double t0 = now_s();
			for (int r = 0; r < reps; r++) {
				bool first[256];
				shoal_grammar_first(p.w, &st, first);
				uint32_t room = way ? shoal_grammar_plain_room(p.w, &st) : 0;
				uint32_t a = 0;
				for (uint32_t i = 0; i < nv; i++) {
					uint32_t len = off[i + 1] - off[i];
					if (!len || !first[bytes[off[i]]])
						continue;
					if (way && plain[i] && len <= room) {
						a++;
						continue;
					}
					shoal_grammar_state t = st;
					a += shoal_grammar_feed(p.w, &t, bytes + off[i], len);
				}
				if (way)
					fast = a;
				else
					allowed = a;
			}
			mask_ms[way] = (now_s() - t0) * 1e3 / reps;
		}
		if (fast != allowed) {
			fprintf(stderr, "the fast path allows %u, feeding %u\n", fast, allowed);
			return 1;
		}
		double t0;
		t0 = now_s();
		volatile uint32_t ok = 0;
		for (int r = 0; r < 100000; r++) {
			uint32_t i = (uint32_t)(r * 7919u) % nv;
			shoal_grammar_state t = st;
			ok += shoal_grammar_feed(p.w, &t, bytes + off[i], off[i + 1] - off[i]);
		}
		double check_us = (now_s() - t0) * 1e6 / 100000;
		printf(
		    "%-18s mask %.2f ms, %.2f ms with the plain fast path (%u of %u tokens fit); "
		    "one check %.2f us\n",
		    label[k], mask_ms[0], mask_ms[1], allowed, nv, check_us);
	}
	free(p.w);
	free(off);
	free(plain);
	free(bytes);
	shoal_tokenizer_free(tok);
	shoal_gguf_free(g);
	return 0;
}
