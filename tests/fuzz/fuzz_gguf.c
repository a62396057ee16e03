/*
 * tests/fuzz/fuzz_gguf.c: libFuzzer target for everything a model file reaches
 * (not part of make check): the GGUF reader, the tokenizer built from its
 * metadata (an encode and decode of a fixed text), the model's
 * hyper-parameters and tensor table, and a small engine (3 rows through all
 * layers) when the model is tiny.
 *
 *   make fuzz-build && tests/fuzz/fuzz_gguf -max_total_time=600 -max_len=65536 \
 *     RUN_DIR tests/fuzz/corpus_gguf
 *
 * The seeds were made by tests/helpers/gen_fixture:
 *   gen_fixture --arch qwen3 --type Q8_0 --layers 1 --dim 32 --ff 32 --heads 2 \
 *     --kv-heads 1 --vocab 260 --ctx 16 tests/fuzz/corpus_gguf/qwen3-q8.gguf
 * (and the same with --arch llama).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "models/gguf.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "runtime/engine/engine.h"
#include "runtime/cpu/backend_cpu.h"

static void fuzz_tokenizer(const shoal_gguf *g)
{
	static const char text[] =
	    "Hello world <|im_end|> 123  \xe2\x96\x81x\xf0\x9f\x98\x80 abc\n\t";
	shoal_tokenizer *t;
	char why[SHOAL_WHY_LEN], piece[64];
	if (shoal_tokenizer_from_gguf(g, &t, why, sizeof why))
		return;
	int32_t *ids;
	size_t n;
	if (!shoal_tokenizer_encode(t, text, sizeof text - 1, true, true, &ids, &n)) {
		char *s;
		size_t sl;
		if (!shoal_tokenizer_decode(t, ids, n, true, &s, &sl))
			free(s);
		free(ids);
	}
	for (uint32_t i = 0; i < shoal_tokenizer_n_vocab(t) && i < 300; i++)
		shoal_tokenizer_piece(t, (int32_t)i, true, piece, sizeof piece);
	shoal_tokenizer_free(t);
}

static void fuzz_engine(const shoal_model *m)
{
	char why[SHOAL_WHY_LEN];
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 8;
	c.max_rows = 4;
	shoal_engine *e;
	if ((uint64_t)m->hp.n_embd * m->hp.n_layer >= 100000 ||
	    shoal_engine_new(m, &c, &e, why, sizeof why))
		return;
	uint32_t slot, V = m->hp.n_vocab;
	shoal_engine_session_open(e, &slot);
	int32_t tok[3] = {0, (int32_t)(1 % V), (int32_t)(2 % V)};
	uint32_t sess[3] = {slot, slot, slot}, pos[3] = {0, 1, 2};
	uint8_t want[3] = {0, 1, 1};
	float *logits = malloc(2 * sizeof(float) * V);
	shoal_engine_batch b = {.n_rows = 3,
	                        .tokens = tok,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = logits};
	shoal_engine_run(e, &b, why, sizeof why);
	free(logits);
	shoal_engine_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	static char path[64];
	if (fd < 0) {
		shoal_log_set_level(SHOAL_LOG_ERROR); /* the readers' warnings are expected */
		fd = memfd_create("fuzz_gguf", 0);
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		__builtin_trap();
	shoal_gguf *g;
	shoal_model *m;
	char why[SHOAL_WHY_LEN];
	if (shoal_gguf_open(path, &g, why, sizeof why))
		return 0;
	fuzz_tokenizer(g);
	if (shoal_model_from_gguf(g, &m, why, sizeof why)) /* takes g either way */
		return 0;
	fuzz_engine(m);
	shoal_model_free(m);
	return 0;
}
