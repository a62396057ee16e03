/*
 * tests/fuzz/fuzz_tokenizer.c: libFuzzer target for the tokenizer
 * (models/tokenizer*.c) with the real vocabularies of tests/data/vocab
 * (GPT-2 BPE, Llama-3 BPE, Llama SentencePiece). The first byte picks the
 * vocabulary, the mode and the flags; the rest is either text to encode
 * (any bytes, not only UTF-8) or little-endian 32-bit ids to decode (any
 * value, out of range too). Encoded ids are in the vocabulary and decode;
 * decoding refuses an id outside it; the streaming detokenizer takes any
 * id and emits whole UTF-8 characters only.
 *
 *   make fuzz-build && tests/fuzz/fuzz_tokenizer -max_total_time=60 CORPUS
 * (FUZZ_VOCAB_DIR overrides the directory the vocabularies are read from.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "models/gguf.h"
#include "models/tokenizer.h"

#ifndef FUZZ_VOCAB_DIR
#define FUZZ_VOCAB_DIR "tests/data/vocab"
#endif

static const char *const f_names[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-bpe.gguf",
                                      "ggml-vocab-llama-spm.gguf"};
#define F_N (sizeof f_names / sizeof f_names[0])
static shoal_tokenizer *f_tok[F_N];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FUZZ_VOCAB_DIR");
	char path[512], why[SHOAL_WHY_LEN];
	shoal_log_set_level(SHOAL_LOG_ERROR);
	for (size_t i = 0; i < F_N; i++) {
		shoal_gguf *g;
		snprintf(path, sizeof path, "%s/%s", dir ? dir : FUZZ_VOCAB_DIR, f_names[i]);
		if (shoal_gguf_open(path, &g, why, sizeof why) ||
		    shoal_tokenizer_from_gguf(g, &f_tok[i], why, sizeof why)) {
			fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path, why);
			exit(1);
		}
		shoal_gguf_free(g);
	}
	return 0;
}

/* ids through the streaming detokenizer: its output is valid UTF-8 */
static void detok(const shoal_tokenizer *t, const int32_t *ids, size_t n, bool special)
{
	static char out[1 << 16];
	size_t len = 0;
	shoal_detok d;
	shoal_detok_init(&d, t, special);
	for (size_t i = 0; i < n && len + 1024 < sizeof out; i++)
		len += shoal_detok_push(&d, ids[i], out + len, 1024);
	len += shoal_detok_flush(&d, out + len, sizeof out - len);
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)out[i];
		size_t k = c < 0x80         ? 1
		           : (c >> 5) == 6  ? 2
		           : (c >> 4) == 14 ? 3
		           : (c >> 3) == 30 ? 4
		                            : 0;
		if (!k || i + k > len)
			abort();
		for (size_t j = 1; j < k; j++)
			if (((unsigned char)out[i + j] >> 6) != 2)
				abort();
		i += k;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	unsigned sel = data[0];
	const shoal_tokenizer *t = f_tok[(sel & 3) % F_N];
	bool decode_mode = sel & 4, special = sel & 8, parse = sel & 16;
	uint32_t V = shoal_tokenizer_n_vocab(t);
	data++, size--;
	char *text;
	size_t len;
	char piece[64];
	if (decode_mode) {
		size_t n = size / 4;
		int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
		bool all_in = true;
		for (size_t i = 0; i < n; i++) {
			uint32_t u = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
			             (uint32_t)data[4 * i + 2] << 16 |
			             (uint32_t)data[4 * i + 3] << 24;
			/* mostly ids in the vocabulary, some anything */
			ids[i] = (sel & 32) ? (int32_t)u : (int32_t)(u % (V + 2)) - 1;
			all_in &= ids[i] >= 0 && (uint32_t)ids[i] < V;
			shoal_tokenizer_piece(t, ids[i], special, piece, sizeof piece);
			shoal_tokenizer_is_eog(t, ids[i]);
		}
		shoal_err e = shoal_tokenizer_decode(t, ids, n, special, &text, &len);
		if (all_in != (e == SHOAL_OK) || (e && e != SHOAL_ERR_RANGE))
			abort();
		if (!e) {
			if (strlen(text) > len)
				abort();
			free(text);
		}
		detok(t, ids, n, special);
		free(ids);
		return 0;
	}
	int32_t *ids;
	size_t n;
	if (shoal_tokenizer_encode(t, (const char *)data, size, special, parse, &ids, &n))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= V)
			abort();
	if (shoal_tokenizer_decode(t, ids, n, true, &text, &len))
		abort();
	free(text);
	detok(t, ids, n, true);
	free(ids);
	return 0;
}
