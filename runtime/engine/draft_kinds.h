/*
 * runtime/engine/draft_kinds.h: which drafter a stream gets (--speculate
 * auto|off|lookup|draft|mtp), by name, and making one.
 *
 * Part: runtime/ (engine). auto is prompt lookup here; a draft model and
 * DeepSeek's MTP layer need a model, so their callers make them
 * (runtime/cli/cmd_run.c, runtime/node/serve_draft.c), and a caller that
 * does not (shoal bench) refuses them with shoal_speculate_check.
 */
#ifndef SHOAL_RUNTIME_DRAFT_KINDS_H
#define SHOAL_RUNTIME_DRAFT_KINDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "runtime/engine/draft.h"

typedef enum shoal_speculate_kind {
	SHOAL_SPECULATE_OFF = 0,
	SHOAL_SPECULATE_AUTO,
	SHOAL_SPECULATE_LOOKUP,
	SHOAL_SPECULATE_DRAFT,
	SHOAL_SPECULATE_MTP,
} shoal_speculate_kind;

/* --draft-max: ids a step drafts at most, 1..16 (the pipeline's cap,
 * SHOAL_DIST_DRAFT_MAX); 8 when not given. */
#define SHOAL_SPECULATE_DRAFT_MAX_MAX     16u
#define SHOAL_SPECULATE_DRAFT_MAX_DEFAULT 8u

/* "auto", "off", "lookup", "draft", "mtp" -> *out; another: INVAL with the
 * names in why. */
shoal_err shoal_speculate_parse(const char *name, shoal_speculate_kind *out, char *why,
                                size_t why_len);
const char *shoal_speculate_name(shoal_speculate_kind k);
/* Whether streams can get drafters of kind k here: UNSUPPORTED with a
 * reason for a kind not available yet. */
shoal_err shoal_speculate_check(shoal_speculate_kind k, char *why, size_t why_len);
/* A drafter of kind k for one stream (OFF: ops NULL, OK). */
shoal_err shoal_speculate_drafter(shoal_speculate_kind k, shoal_drafter *out);

#endif
