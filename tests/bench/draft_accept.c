/*
 * tests/bench/draft_accept.c: how well a draft model guesses a target's
 * greedy continuation, and what guessing costs (issue 38's draft-model
 * drafter, runtime/engine/draft_model.h), on one machine with no pipeline.
 *
 *   draft_accept TARGET.gguf DRAFT.gguf TEXT_FILE [k] [n_tokens] [threads]
 *
 * The prompt is the first 96 tokens of TEXT_FILE; the target's greedy
 * continuation of n_tokens (default 96) is computed plainly, timed per
 * token. Then a speculative run is simulated on it: at each point the
 * drafter proposes k (default 4) tokens for the history so far, the
 * matching prefix is accepted plus the target's next token, and so on.
 * Prints the acceptance (accepted / proposed), tokens per verify step, the
 * target's ms per token and the drafter's ms per proposal. Part: tests
 * (bench); never run by make check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "runtime/cpu/backend_cpu.h"
#include "runtime/engine/draft_model.h"
#include "runtime/engine/engine.h"

#define N_PROMPT 96

static int32_t best(const float *x, uint32_t n)
{
	uint32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return (int32_t)b;
}

static int32_t *prompt_of(const shoal_model *m, const char *file, size_t *n)
{
	char why[SHOAL_WHY_LEN] = "";
	FILE *f = fopen(file, "rb");
	static char text[16384];
	size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
	if (f)
		fclose(f);
	shoal_tokenizer *tk = NULL;
	int32_t *ids = NULL;
	if (!len || shoal_tokenizer_from_gguf(m->gguf, &tk, why, sizeof why) ||
	    shoal_tokenizer_encode(tk, text, len, true, false, &ids, n)) {
		fprintf(stderr, "draft_accept: no prompt from %s: %s\n", file, why);
		shoal_tokenizer_free(tk);
		return NULL;
	}
	shoal_tokenizer_free(tk);
	if (*n > N_PROMPT)
		*n = N_PROMPT;
	return ids;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr,
		        "usage: draft_accept TARGET DRAFT TEXT_FILE [k] [n_tokens] [threads]\n");
		return 2;
	}
	size_t k = argc > 4 ? (size_t)atoi(argv[4]) : 4,
	       n_gen = argc > 5 ? (size_t)atoi(argv[5]) : 96;
	uint32_t thr = argc > 6 ? (uint32_t)atoi(argv[6]) : 1;
	char why[SHOAL_WHY_LEN] = "";
	shoal_model *m = NULL;
	if (shoal_model_open(argv[1], &m, why, sizeof why)) {
		fprintf(stderr, "draft_accept: %s: %s\n", argv[1], why);
		return 1;
	}
	size_t np = 0;
	int32_t *prompt = prompt_of(m, argv[3], &np);
	if (!prompt || k < 1 || n_gen < 1)
		return 1;
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_threads = thr;
	c.n_ctx = (uint32_t)(np + n_gen + k + 1);
	c.max_rows = 128;
	shoal_engine *e = NULL;
	uint32_t slot;
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_engine_session_open(e, &slot)) {
		fprintf(stderr, "draft_accept: target: %s\n", why);
		return 1;
	}
	/* the target's plain greedy continuation */
	size_t total = np + n_gen;
	int32_t *seq = malloc(total * sizeof *seq);
	float *lg = malloc((size_t)m->hp.n_vocab * sizeof *lg);
	uint32_t *pos = malloc(np * sizeof *pos), *sess = malloc(np * sizeof *sess);
	uint8_t *want = calloc(np, 1);
	memcpy(seq, prompt, np * sizeof *seq);
	for (size_t i = 0; i < np; i++) {
		pos[i] = (uint32_t)i;
		sess[i] = slot;
	}
	want[np - 1] = 1;
	shoal_engine_batch b = {.n_rows = (uint32_t)np,
	                        .tokens = seq,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = lg};
	if (shoal_engine_run(e, &b, why, sizeof why))
		return 1;
	uint64_t t0 = shoal_clock_now_ns();
	for (size_t i = np; i < total; i++) {
		seq[i] = best(lg, m->hp.n_vocab);
		uint32_t p = (uint32_t)i;
		uint8_t w1 = 1;
		shoal_engine_batch b1 = {.n_rows = 1,
		                         .tokens = &seq[i],
		                         .session = &slot,
		                         .pos = &p,
		                         .want_logits = &w1,
		                         .logits = lg};
		if (i + 1 < total && shoal_engine_run(e, &b1, why, sizeof why))
			return 1;
	}
	double ms_target = (double)(shoal_clock_now_ns() - t0) / 1e6 / (double)(n_gen - 1);

	shoal_drafter d;
	shoal_engine_config dc = c;
	dc.max_rows = 128;
	shoal_draft_model *dm = NULL;
	if (shoal_draft_model_open(argv[2], m, &dc, &dm, why, sizeof why) ||
	    shoal_draft_model_drafter(dm, &d, why, sizeof why)) {
		fprintf(stderr, "draft_accept: %s\n", why);
		return 1;
	}
	int32_t *out = malloc(k * sizeof *out);
	size_t at = np, proposed = 0, accepted = 0, steps = 0;
	uint64_t t_draft = 0;
	/* the prompt's prefill in the drafter is not counted */
	d.ops->propose(d.self, seq, at, out, k);
	while (at < total) {
		uint64_t t1 = shoal_clock_now_ns();
		size_t got = d.ops->propose(d.self, seq, at, out, k);
		t_draft += shoal_clock_now_ns() - t1;
		size_t a = 0;
		while (a < got && at + a < total && out[a] == seq[at + a])
			a++;
		d.ops->feedback(d.self, got, a);
		proposed += got;
		accepted += a;
		steps++;
		at += a + 1;
	}
	printf("target %s\ndraft  %s\nk %zu, %zu tokens: acceptance %.1f%% (%zu of %zu), %.2f "
	       "tokens per step\ntarget %.2f ms/token, drafter %.2f ms per proposal of %zu\n",
	       argv[1], argv[2], k, n_gen, proposed ? 100.0 * accepted / proposed : 0, accepted,
	       proposed, (double)n_gen / steps, ms_target, (double)t_draft / 1e6 / steps, k);
	d.ops->free(d.self);
	shoal_draft_model_free(dm);
	shoal_engine_free(e);
	shoal_model_free(m);
	free(prompt);
	free(seq);
	free(lg);
	free(pos);
	free(sess);
	free(want);
	free(out);
	return 0;
}
