/*
 * runtime/engine/draft_lookup.h: prompt lookup, a drafter (draft.h) with
 * no weights: the ids that followed the latest earlier occurrence of the
 * history's last few ids.
 *
 * Part: runtime/ (engine). Pays where a reply repeats its prompt or
 * itself (code edits, quotes, summaries that reuse phrases, lists).
 */
#ifndef SHOAL_RUNTIME_DRAFT_LOOKUP_H
#define SHOAL_RUNTIME_DRAFT_LOOKUP_H

#include "base/err.h"
#include "runtime/engine/draft.h"

/* The longest suffix tried first and the shortest: 3 and 1. */
#define SHOAL_DRAFT_LOOKUP_NGRAM_MAX 3u
#define SHOAL_DRAFT_LOOKUP_NGRAM_MIN 1u

/* A prompt-lookup drafter for one stream into *out (free with
 * out->ops->free(out->self)); NOMEM. */
shoal_err shoal_draft_lookup_new(shoal_drafter *out);

/* The proposal itself, for tests: the longest suffix of hist[n] of
 * SHOAL_DRAFT_LOOKUP_NGRAM_MAX..MIN ids that occurs earlier with an id
 * after it, the latest such occurrence; the k ids that follow it into
 * out, those past the history's end repeating the ones before them with
 * the occurrence's distance as the period (hist then out read as one
 * sequence). Returns k, or 0 without a match. */
size_t shoal_draft_lookup_propose(const int32_t *hist, size_t n, int32_t *out, size_t k);

#endif
