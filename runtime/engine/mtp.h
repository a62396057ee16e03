/*
 * runtime/engine/mtp.h: DeepSeek's multi-token prediction (MTP) layer, the
 * nextn block of a deepseek2 file (models/model.h: shoal_nextn), run beside
 * the main model to guess one more token, and a drafter (draft.h) that
 * proposes that guess (issue 38).
 *
 * Part: runtime/ (engine). For a row at position p, with h_p the main
 * model's final hidden state at p (before its output norm: what an engine's
 * hidden_out gives) and t the token at p + 1:
 *   e = embed(t), zero when p == 0
 *   x = eh_proj [rmsnorm(e) * enorm | rmsnorm(rmsnorm(h_p) * output_norm) * hnorm]
 *   x = the nextn block (MLA attention over this session's MTP cache rows
 *       [0, p], then its MoE or dense FFN), its own KV cache row at p
 *   logits = shared_head_head (rmsnorm(x) * shared_head_norm)  -> token p + 2
 * Sources (mtp.c says which detail comes from which). The block runs in an
 * engine of its own (a one-layer view of the model), so it batches,
 * keeps per-session KV and is deterministic like any engine; the input
 * norms and eh_proj run on a backend instance of its own.
 */
#ifndef SHOAL_RUNTIME_MTP_H
#define SHOAL_RUNTIME_MTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/model.h"
#include "runtime/engine/draft.h"
#include "runtime/engine/engine.h"

typedef struct shoal_mtp shoal_mtp; /* opaque */

/* The MTP layer of model m (borrowed; it must have m->nextn, else
 * SHOAL_ERR_NOTFOUND with a reason). From cfg are used: backend,
 * n_threads, n_ctx, max_sessions, max_rows, kv_type, tensor_held (a
 * weights cache must hold the layer's tensors too) (the layer range,
 * embedding, head, experts and tensor group are the layer's own: all of
 * it, here). */
shoal_err shoal_mtp_new(const shoal_model *m, const shoal_engine_config *cfg, shoal_mtp **out,
                        char *why, size_t why_len);
void shoal_mtp_free(shoal_mtp *t); /* NULL is a no-op */

/* The engine that runs the block: its sessions (shoal_engine_session_*)
 * are the MTP's sessions, one per stream, positions from 0 in order. */
shoal_engine *shoal_mtp_engine(shoal_mtp *t);

typedef struct shoal_mtp_batch {
	uint32_t n_rows;            /* 1..max_rows */
	const float *hidden;        /* (n_rows, n_embd) h_p, before the output norm */
	const int32_t *next;        /* (n_rows) the token at p + 1; -1: not known
	                               (its embedding zeroed, as at p == 0) */
	const uint32_t *session;    /* (n_rows) open sessions of shoal_mtp_engine */
	const uint32_t *pos;        /* (n_rows) p; a session's rows consecutive */
	const uint8_t *want_logits; /* (n_rows) or NULL: none */
	float *logits;              /* (rows wanting them, n_vocab): token p + 2 */
} shoal_mtp_batch;

/* Run the rows: each writes its session's MTP cache at p. Bad ids, tags
 * or sizes -> SHOAL_ERR_RANGE or _INVAL with a reason, nothing changed. */
shoal_err shoal_mtp_run(shoal_mtp *t, const shoal_mtp_batch *b, char *why, size_t why_len);

/* ---- the drafter ------------------------------------------------------------
 *
 * One stream's MTP drafter. It lives where the main model's final hidden
 * states are, the last stage (or `shoal run`'s engine), not on the owner:
 *   1. after every step, the last stage pushes the rows it keeps: for each
 *      accepted position p in order (the prompt's too, from 0), h_p from
 *      its engine's hidden_out and the token at p + 1 (the accepted draft,
 *      or the target's own choice for the last row); the push runs the MTP
 *      layer over them and keeps the greedy guess for the token after;
 *   2. propose(hist, n, ...) with hist the stream's ids (n = last pushed
 *      p + 2) gives that one guess (0 if the pushes are not in step with
 *      hist); the last stage sends it back with the step's result, and the
 *      owner adds it as a draft row of the next step.
 * Rows pushed again from an earlier p (a replay, a rewind) overwrite the
 * MTP cache from p on. feedback is a no-op: only kept rows are pushed. */
shoal_err shoal_mtp_drafter_new(shoal_mtp *t, shoal_drafter *out, char *why, size_t why_len);
shoal_err shoal_mtp_drafter_push(shoal_drafter *d, uint32_t pos0, uint32_t n_rows,
                                 const float *hidden, const int32_t *next, char *why,
                                 size_t why_len);
/* While `on`, pushed rows wait (up to 64 of them, then they run as one
 * batch, without a guess) and a push leaves no guess; the next push after
 * the deferral ends runs the waiting rows, then its own, and guesses. For
 * a session whose owner does not draft for a while (draft_ctl.h's pause):
 * the layer and its head then cost a batch run per 64 tokens, not a run
 * per token. Positions and guesses are as without deferral. */
void shoal_mtp_drafter_defer(shoal_drafter *d, bool on);
/* The positions the drafter holds, run or deferred ([0, len): a push must
 * start at or before len, else RANGE), and the guess of the latest push
 * (-1: none). */
bool shoal_mtp_drafter_is(const shoal_drafter *d); /* one of shoal_mtp_drafter_new's */
uint32_t shoal_mtp_drafter_len(const shoal_drafter *d);
int32_t shoal_mtp_drafter_guess(const shoal_drafter *d);

/* ---- the owner's side -------------------------------------------------------
 *
 * Through a cluster (runtime/dist/dist.h "Speculation") the MTP drafter
 * runs on the last stage and its guess comes back with the step's result;
 * the owner's drafter only proposes that guess: set(after, guess) when the
 * result that ends a step arrives (after = the token it chose), and the
 * next propose whose history ends in `after` gives it, once. fn (may be
 * NULL) hears each set, on the owner's thread (a test checks the guesses
 * with it). */
typedef void (*shoal_mtp_carry_fn)(void *ctx, int32_t after, int32_t guess);
shoal_err shoal_mtp_carry_new(shoal_drafter *out, shoal_mtp_carry_fn fn, void *ctx); /* NOMEM */
bool shoal_mtp_carry_is(const shoal_drafter *d);
void shoal_mtp_carry_set(shoal_drafter *d, int32_t after, int32_t guess);

#endif
