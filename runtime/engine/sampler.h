/*
 * runtime/engine/sampler.h: picking the next token from logits.
 *
 * Part: runtime/ (engine). Greedy (temp 0), or temperature with top-k,
 * top-p, min-p and a repetition penalty; OpenAI's logit bias and presence
 * and frequency penalties at any temperature. The draw at step t is a function of
 * (seed, t) only, so replaying a session's history reproduces it (DESIGN
 * invariant 2). Storage is allocated once at init: nothing per token.
 */
#ifndef SHOAL_RUNTIME_SAMPLER_H
#define SHOAL_RUNTIME_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* logit_bias entries per request (OpenAI names no limit; a client bans or
 * boosts a few words, a few tokens each) */
#define SHOAL_SAMPLER_MAX_BIAS 128

typedef struct shoal_sampler_params {
	float temp;            /* 0: greedy (argmax, lowest id on ties) */
	int32_t top_k;         /* 0: off */
	float top_p;           /* 1.0: off */
	float min_p;           /* 0.0: off */
	float repeat_penalty;  /* 1.0: off */
	int32_t repeat_last_n; /* how many recent tokens the penalties look at */
	uint64_t seed;
	/* OpenAI's, over the same recent tokens (prompt and generated, as
	 * llama.cpp; OpenAI counts the generated ones only): a token's logit
	 * loses presence once if it occurs there, and frequency times its
	 * count. [-2, 2]; 0: off. */
	float presence_penalty, frequency_penalty;
	/* added to the logits of bias_id[i] before everything else; ids out of
	 * the vocabulary are ignored. [-100, 100]. */
	uint32_t n_bias;
	int32_t bias_id[SHOAL_SAMPLER_MAX_BIAS];
	float bias[SHOAL_SAMPLER_MAX_BIAS];
	/* Structured output: a grammar program (models/grammar.h) the reply
	 * must follow, carried with the other settings to the stage that
	 * samples; NULL/0: none. Borrowed; the sampler itself never reads it
	 * (the sampling stage turns it into a shoal_sampler_filter). */
	const uint32_t *grammar;
	uint32_t n_grammar;
} shoal_sampler_params;

/* The defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalty,
 * repeat_last_n 64, seed 0. */
shoal_sampler_params shoal_sampler_defaults(void);

typedef struct shoal_sampler shoal_sampler; /* opaque */

shoal_err shoal_sampler_new(const shoal_sampler_params *p, uint32_t n_vocab, shoal_sampler **out);
void shoal_sampler_free(shoal_sampler *s); /* NULL is a no-op */

/* Pick a token from logits[n_vocab] (not modified) at generation step
 * `step`, given the recent history (for the penalty; may be NULL/0). */
int32_t shoal_sampler_sample(shoal_sampler *s, const float *logits, const int32_t *history,
                             size_t n_history, uint64_t step);

/* Which tokens may come next (constrained sampling). Neither callback may
 * allocate or block; both are pure functions of the caller's state. */
typedef struct shoal_sampler_filter {
	bool (*allow)(void *ctx, int32_t id);               /* id may come next */
	void (*mask)(void *ctx, float *logits, uint32_t n); /* -INFINITY where not */
	void *ctx;
} shoal_sampler_filter;

/* As shoal_sampler_sample, under filter f (NULL: none): the token drawn
 * from the raw logits if f allows it (the common case: one check), else
 * the draw from the logits with every refused token masked out; the same
 * (seed, step) either way, so the choice is a function of the logits, the
 * filter's state, the seed and the step. -1 when f allows no token. */
int32_t shoal_sampler_sample_filtered(shoal_sampler *s, const float *logits, const int32_t *history,
                                      size_t n_history, uint64_t step,
                                      const shoal_sampler_filter *f);

/* log-softmax of the raw logits: the chosen token's logprob and the k best
 * (id, logprob) pairs, best first (ties: lower id first). k <= n_vocab. */
void shoal_logprobs_top(const float *logits, uint32_t n_vocab, int32_t chosen, float *chosen_lp,
                        uint32_t k, int32_t *top_ids, float *top_lps);

#endif
