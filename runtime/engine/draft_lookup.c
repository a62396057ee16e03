/*
 * runtime/engine/draft_lookup.c: prompt lookup (draft_lookup.h): an n-gram
 * match of the history's tail against the history itself.
 *
 * Part: runtime/ (engine). The latest occurrence wins over older ones: a
 * reply that loops or copies a passage repeats the most recent text, and
 * an occurrence too recent to have k ids after it is read as a loop: the
 * proposal repeats what followed it. A
 * search is a backward scan of the history per suffix length, a few
 * thousand comparisons for a long prompt: nothing next to a step of any
 * model.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/draft_lookup.h"

size_t shoal_draft_lookup_propose(const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	if (!k)
		return 0;
	for (size_t m = SHOAL_DRAFT_LOOKUP_NGRAM_MAX; m >= SHOAL_DRAFT_LOOKUP_NGRAM_MIN; m--) {
		if (n < m + 1)
			continue;
		const int32_t *tail = hist + n - m;
		/* occurrences at i with an id after them: i + m < n, the tail
		 * itself (i = n - m) excluded */
		for (size_t i = n - m; i-- > 0;) {
			if (hist[i] != tail[0] || memcmp(hist + i, tail, m * sizeof *hist))
				continue;
			/* what followed it, and past the history's end the
			 * proposal itself: a tail that occurred d ids back
			 * continues with a period of d (a loop shorter than k
			 * drafts k ids, not one period) */
			for (size_t j = 0; j < k; j++) {
				size_t at = i + m + j;
				out[j] = at < n ? hist[at] : out[at - n];
			}
			return k;
		}
	}
	return 0;
}

static size_t lookup_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	(void)self;
	return shoal_draft_lookup_propose(hist, n, out, k);
}

static void lookup_feedback(void *self, size_t proposed, size_t accepted)
{
	(void)self;
	(void)proposed;
	(void)accepted;
}

static void lookup_free(void *self)
{
	free(self);
}

static const shoal_drafter_ops lookup_ops = {
    .name = "lookup", .propose = lookup_propose, .feedback = lookup_feedback, .free = lookup_free};

shoal_err shoal_draft_lookup_new(shoal_drafter *out)
{
	/* no state yet; a byte so that self is a distinct allocation */
	void *self = malloc(1);
	if (!self)
		return SHOAL_ERR_NOMEM;
	*out = (shoal_drafter){.ops = &lookup_ops, .self = self};
	return SHOAL_OK;
}
