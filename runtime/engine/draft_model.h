/*
 * runtime/engine/draft_model.h: a draft-model drafter (draft.h): a second,
 * small model with the target's vocabulary, run by an engine of its own on
 * the owner, proposes the next k tokens greedily (issue 38, `--draft
 * MODEL.gguf`).
 *
 * Part: runtime/ (engine). The drafter keeps the ids whose KV its engine
 * holds; each propose finds the longest prefix of the stream's history it
 * already holds, runs the rest (so drafts that were rejected are rolled
 * back, and accepted ones are not run again), then decodes k - 1 more rows.
 * Its proposals are those of a plain greedy run of the draft model over the
 * same history (the engine's logits do not depend on batching), whatever
 * was proposed or accepted before.
 */
#ifndef SHOAL_RUNTIME_DRAFT_MODEL_H
#define SHOAL_RUNTIME_DRAFT_MODEL_H

#include <stddef.h>

#include "base/err.h"
#include "models/model.h"
#include "runtime/engine/draft.h"
#include "runtime/engine/engine.h"

/* Whether draft's vocabulary is target's: the same number of tokens and,
 * where both files list them (tokenizer.ggml.tokens), the same strings and
 * the same tokenizer model. SHOAL_OK, or SHOAL_ERR_INVAL with a reason
 * naming the first difference (sizes, or the id and both strings). */
shoal_err shoal_draft_vocab_check(const shoal_model *target, const shoal_model *draft, char *why,
                                  size_t why_len);

/* Open the draft model at path, check its vocabulary against target's
 * (borrowed; only read here) and make its engine: from cfg are used
 * backend (required), n_threads, n_ctx (0: the draft's trained context),
 * max_rows (rows per prefill chunk, and k - 1 <= max_rows is not needed:
 * decode is a row at a time) and kv_type. *out owns the model and engine;
 * out->ops->free releases them. One drafter serves one stream. */
shoal_err shoal_draft_model_open(const char *path, const shoal_model *target,
                                 const shoal_engine_config *cfg, shoal_drafter *out, char *why,
                                 size_t why_len);

#endif
