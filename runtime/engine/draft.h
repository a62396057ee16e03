/*
 * runtime/engine/draft.h: a drafter, the owner's guess at the tokens that
 * follow a stream, for exact speculative decoding (issue 38).
 *
 * Part: runtime/ (engine). A drafter only proposes: the last stage computes
 * the target's own choice at every drafted position with the same (seed, t)
 * draws as without speculation and keeps a draft only where it equals that
 * choice, so what a drafter proposes changes speed, never tokens. Kinds:
 * prompt lookup (n-grams of the prompt and the output so far), a draft
 * model run by the owner's engine, and DeepSeek's MTP layer (which runs on
 * the last stage, not here: it has the final hidden state).
 *
 * One drafter serves one stream; it is not shared between threads.
 */
#ifndef SHOAL_RUNTIME_DRAFT_H
#define SHOAL_RUNTIME_DRAFT_H

#include <stddef.h>
#include <stdint.h>

typedef struct shoal_drafter_ops {
	const char *name; /* "lookup", "draft", ... */
	/* Up to k ids that may follow hist[0..n) (the whole prompt and the
	 * output so far, the last accepted id included); returns how many were
	 * written to out (0: no guess this step). */
	size_t (*propose)(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k);
	/* Of the last proposal of `proposed` ids, the first `accepted` were
	 * kept (the stream's history then grows by accepted + 1). */
	void (*feedback)(void *self, size_t proposed, size_t accepted);
	/* Optional (NULL: nothing to do): the stream's history hist[0..n)
	 * before its first proposal, given while the target computes the
	 * prompt, so that a drafter with state of its own (a draft model's
	 * KV of the prompt) takes it in then, not in a decode step. */
	void (*prepare)(void *self, const int32_t *hist, size_t n);
	void (*free)(void *self);
} shoal_drafter_ops;

typedef struct shoal_drafter {
	const shoal_drafter_ops *ops;
	void *self;
} shoal_drafter;

#endif
