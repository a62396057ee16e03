/*
 * runtime/engine/draft_model.h: draft-model drafters (draft.h): a second,
 * small model with the target's vocabulary, run by an engine of its own on
 * the owner, proposes the next k tokens greedily (issue 38, `--draft
 * MODEL.gguf`).
 *
 * Part: runtime/ (engine). A shoal_draft_model is the model and its engine,
 * opened once (the vocabulary checked then); each stream gets a drafter of
 * it, which holds one of the engine's session slots. A drafter keeps the
 * ids whose KV its session holds; each propose finds the longest prefix of
 * the stream's history it already holds, runs the rest (so drafts that were
 * rejected are rolled back, and accepted ones are not run again), then
 * decodes k - 1 more rows. Its proposals are those of a plain greedy run of
 * the draft model over the same history (the engine's logits do not depend
 * on batching), whatever was proposed or accepted before. The drafters of
 * one draft model share its engine: call them from one thread at a time.
 */
#ifndef SHOAL_RUNTIME_DRAFT_MODEL_H
#define SHOAL_RUNTIME_DRAFT_MODEL_H

#include <stddef.h>

#include "base/err.h"
#include "models/model.h"
#include "runtime/engine/draft.h"
#include "runtime/engine/engine.h"

typedef struct shoal_draft_model shoal_draft_model; /* opaque */

/* Whether draft's vocabulary is target's: the same number of tokens and,
 * where both files list them (tokenizer.ggml.tokens), the same strings and
 * the same tokenizer model. SHOAL_OK, or SHOAL_ERR_INVAL with a reason
 * naming the first difference (sizes, or the id and both strings). */
shoal_err shoal_draft_vocab_check(const shoal_model *target, const shoal_model *draft, char *why,
                                  size_t why_len);

/* Open the draft model at path, check its vocabulary against target's
 * (borrowed; only read here) and make its engine: from cfg are used
 * backend (required), n_threads, n_ctx (0: the draft's trained context),
 * max_sessions (streams drafting at once), max_rows (rows per prefill
 * chunk) and kv_type. The reason names the path. */
shoal_err shoal_draft_model_open(const char *path, const shoal_model *target,
                                 const shoal_engine_config *cfg, shoal_draft_model **out, char *why,
                                 size_t why_len);
/* Free it (NULL is a no-op), after every drafter of it is freed. */
void shoal_draft_model_free(shoal_draft_model *dm);

/* A drafter of dm for one stream (SHOAL_ERR_BUSY when all max_sessions
 * are taken); out->ops->free gives its session back. */
shoal_err shoal_draft_model_drafter(shoal_draft_model *dm, shoal_drafter *out, char *why,
                                    size_t why_len);

#endif
