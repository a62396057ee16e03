/*
 * runtime/engine/generate.h: the one generation path: a prompt prefilled in
 * chunks, then tokens sampled and fed back until a stop condition.
 *
 * Part: runtime/ (engine). Two layers. The sequence (shoal_gen_seq) is the
 * step/stop state machine with the position bookkeeping: it knows nothing of
 * engines, so the cluster's session owner drives it with ids that come back
 * from the last stage (runtime/dist/dist_owner.c). The generator (shoal_gen)
 * is the one-stage case: it runs a sequence on a whole-model engine here,
 * samples, and times the phases; `shoal run`, `shoal bench` and
 * `shoal perplexity` use it. Divisions: the sequence, sampling one step,
 * the generator.
 */
#ifndef SHOAL_RUNTIME_GENERATE_H
#define SHOAL_RUNTIME_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/run_limits.h"
#include "models/tokenizer.h"
#include "runtime/engine/draft_ctl.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"

/* Top logprobs per token at most: the run limit (base/run_limits.h). */
#define SHOAL_GEN_MAX_LOGPROBS SHOAL_RUN_MAX_LOGPROBS

/* ---- the sequence --------------------------------------------------------
 *
 * Positions: the prompt fills [0, n_prompt). The token of step s (s = 0 for
 * the first generated one) is sampled from the logits of position
 * n_prompt - 1 + s, and, if generation goes on, fed back at position
 * n_prompt + s, whose logits give step s + 1.
 *
 *                accept(id)              next(caller_stop)
 *     SAMPLE s ------------> HAND OUT s -----------------> FEED s --> SAMPLE s+1
 *        |  end-of-generation id      |  caller stop, max_tokens
 *        |  (not handed out)          |  accepted, context full
 *        +-------------------> DONE <-+
 *
 *   transition                      function
 *   start (DONE if max_tokens 0)    shoal_gen_seq_init
 *   prompt rows in chunks           shoal_gen_seq_chunk
 *   SAMPLE -> HAND OUT / DONE       shoal_gen_seq_accept
 *   HAND OUT -> FEED / DONE         shoal_gen_seq_next (FEED at shoal_gen_seq_pos)
 */

typedef enum shoal_gen_stop {
	SHOAL_GEN_STOP_NONE = 0, /* running */
	SHOAL_GEN_STOP_MAX,      /* max_tokens accepted */
	SHOAL_GEN_STOP_EOG,      /* an end-of-generation token (not handed out) */
	SHOAL_GEN_STOP_CTX,      /* the context is full */
	SHOAL_GEN_STOP_CALLER,   /* the token's receiver asked to stop */
} shoal_gen_stop;

typedef struct shoal_gen_limits {
	uint32_t max_tokens;        /* tokens to sample, EOG included; 0: none */
	uint32_t n_ctx;             /* positions available; 0: no limit */
	const shoal_tokenizer *eog; /* stop at its end-of-generation ids; NULL:
	                               never. Borrowed for the sequence's life. */
} shoal_gen_limits;

/* Caller-owned; the fields are read through the functions below. */
typedef struct shoal_gen_seq {
	uint32_t n_prompt;
	shoal_gen_limits lim;
	uint32_t step; /* tokens accepted */
	shoal_gen_stop stop;
} shoal_gen_seq;

/* The position whose logits give the token of step `step`. */
static inline uint32_t shoal_gen_pos_of_step(uint32_t n_prompt, uint32_t step)
{
	return n_prompt - 1 + step;
}

/* The step whose token the logits of position pos >= n_prompt - 1 give. */
static inline uint32_t shoal_gen_step_of_pos(uint32_t n_prompt, uint32_t pos)
{
	return pos - (n_prompt - 1);
}

/* Start a sequence for a prompt of n_prompt >= 1 tokens (lim copied). */
void shoal_gen_seq_init(shoal_gen_seq *q, uint32_t n_prompt, const shoal_gen_limits *lim);

/* The rows of the prefill chunk that starts at prompt position p0: at most
 * max_rows, 0 once p0 reaches the prompt's end. Prefill loops over
 *     for (p0 = 0; (n = shoal_gen_seq_chunk(q, p0, R)); p0 += n)  */
uint32_t shoal_gen_seq_chunk(const shoal_gen_seq *q, uint32_t p0, uint32_t max_rows);

/* The position whose logits the next sample reads; after shoal_gen_seq_next
 * said NONE, where the accepted token is fed. */
uint32_t shoal_gen_seq_pos(const shoal_gen_seq *q);
uint32_t shoal_gen_seq_step(const shoal_gen_seq *q); /* the next step to sample */
shoal_gen_stop shoal_gen_seq_stop(const shoal_gen_seq *q);

/* The token sampled at the current step (the sequence must be running):
 * counts the step; DONE with EOG for an end-of-generation id, which is not
 * to be handed out; else NONE: hand it out, then call shoal_gen_seq_next. */
shoal_gen_stop shoal_gen_seq_accept(shoal_gen_seq *q, int32_t id);

/* After the accepted token was handed out (caller_stop: its receiver wants
 * no more): the reason to stop, or NONE to feed it at shoal_gen_seq_pos. A
 * sequence already done returns its reason unchanged. */
shoal_gen_stop shoal_gen_seq_next(shoal_gen_seq *q, bool caller_stop);

/* ---- sampling one step ------------------------------------------------------ */

/* Sample the token of step `step` from logits (n_vocab), the history (for
 * the repetition penalty; may be NULL/0) as shoal_sampler_sample_filtered
 * under filter f (NULL: none; -1 when f allows no token); with lp,
 * also its logprob and the k best (id, logprob) pairs into top_ids/top_lps
 * (as shoal_logprobs_top; k <= n_vocab). lp NULL: no logprobs (k unused). */
int32_t shoal_gen_pick(shoal_sampler *s, const float *logits, uint32_t n_vocab, const int32_t *hist,
                       size_t n_hist, uint32_t step, const shoal_sampler_filter *f, float *lp,
                       uint32_t k, int32_t *top_ids, float *top_lps);

/* ---- the generator -------------------------------------------------------- */

typedef struct shoal_gen shoal_gen; /* opaque */

/* One generated token, handed to the callback (pointers borrowed). */
typedef struct shoal_gen_token {
	uint32_t step; /* 0 for the first generated token */
	int32_t id;
	float logprob;          /* with cfg.logprob, else 0 */
	uint32_t n_top;         /* cfg.n_top */
	const int32_t *top_ids; /* (n_top) best first */
	const float *top_lps;   /* (n_top) */
} shoal_gen_token;

/* Return nonzero to stop after this token (it is not fed back then). */
typedef int (*shoal_gen_token_fn)(void *ctx, const shoal_gen_token *t);
/* The logits (n_vocab, borrowed) of prompt position pos. */
typedef void (*shoal_gen_logits_fn)(void *ctx, uint32_t pos, const float *logits);

typedef struct shoal_gen_config {
	shoal_sampler_params sampler;
	bool logprob;       /* give each token's logprob */
	uint32_t n_top;     /* and its n_top best alternatives (needs logprob) */
	bool prompt_logits; /* runs may ask for the logits of many prompt rows
	                       (a logits buffer of max_rows rows instead of 1) */
	bool speculate;     /* runs may carry a drafter (logits for its rows) */
} shoal_gen_config;

/* Make a generator on engine e (borrowed; it must own the whole model:
 * embedding, all layers, head). It takes one session slot of e until freed
 * (BUSY if none is free) and allocates all it needs here: nothing per
 * token. Bad config -> INVAL with a reason. */
shoal_err shoal_gen_new(shoal_engine *e, const shoal_gen_config *cfg, shoal_gen **out, char *why,
                        size_t why_len);
void shoal_gen_free(shoal_gen *g); /* NULL is a no-op */

typedef struct shoal_gen_request {
	const int32_t *prompt; /* (n_prompt) ids, borrowed for the call */
	uint32_t n_prompt;     /* 1..the engine's n_ctx */
	uint32_t max_tokens;   /* as shoal_gen_limits; the context is the engine's */
	const shoal_tokenizer *eog;
	shoal_gen_token_fn on_token; /* may be NULL */
	void *ctx;                   /* for both callbacks */
	/* Prompt positions [score_from, score_to) hand their logits to
	 * on_logits in order, as the prefill computes them (needs
	 * cfg.prompt_logits; an empty range: none). */
	uint32_t score_from, score_to;
	shoal_gen_logits_fn on_logits;
	/* Exact speculation (needs cfg.speculate): a drafter (ops NULL: none)
	 * the run owns (freed at its end, also when it fails), and the most
	 * ids it drafts a step (0: SHOAL_DRAFT_DEFAULT). Each step feeds the
	 * token and the drafts as rows of one engine run and keeps the drafts
	 * up to the first that differs from the token sampled before it, as
	 * without drafts: the tokens are those of a run without a drafter.
	 * An MTP drafter (mtp.h) is pushed the kept rows' final hidden
	 * states, each once the token after it is handed out. */
	shoal_drafter drafter;
	uint32_t draft_max;
} shoal_gen_request;

/* Timing of one run (CLOCK_MONOTONIC; CPU time of the whole process). */
typedef struct shoal_gen_stats {
	shoal_gen_stop stop;
	uint32_t tokens;         /* handed out */
	uint32_t decode_runs;    /* engine runs of one fed token */
	uint64_t prefill_ns;     /* the prompt's chunks */
	uint64_t decode_ns;      /* end of prefill to the end of the last decode run */
	uint64_t decode_cpu_ns;  /* CPU time over the same span */
	uint64_t decode_best_ns; /* the fastest step: sample, hand out, run */
	uint32_t drafted;        /* ids drafted (speculation) */
	uint32_t accepted;       /* of those, kept */
} shoal_gen_stats;

/* Run one generation from position 0 of the generator's session (reset
 * first): prefill in chunks of the engine's max_rows (logits only for the
 * last prompt row when tokens are to be sampled, and for the scored range),
 * then sample, hand out and feed as the sequence says. st may be NULL.
 * An engine error (e.g. a token id out of the vocabulary) ends the run with
 * it and the engine's reason; tokens handed out before stay handed out. */
shoal_err shoal_gen_run(shoal_gen *g, const shoal_gen_request *rq, shoal_gen_stats *st, char *why,
                        size_t why_len);

#endif
