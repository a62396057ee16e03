/*
 * runtime/engine/draft_ctl.h: one stream's speculation: its drafter
 * (draft.h), the history the drafter reads (the prompt and the tokens
 * handed out), the drafts of the step in flight, and the draft length
 * adapted to how well drafts paid lately (draft_ctl.c says how).
 *
 * Part: runtime/ (engine). The generator (generate.h) and the cluster's
 * session owner (runtime/dist/dist_owner.c) drive it the same way: plan
 * a step's drafts, hand out its tokens, say how many drafts were kept.
 */
#ifndef SHOAL_RUNTIME_DRAFT_CTL_H
#define SHOAL_RUNTIME_DRAFT_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "runtime/engine/draft.h"

/* Drafted ids one step carries at most: past 16 rows a step costs more
 * than a token (the weights are no longer the bottleneck on a CPU), and
 * acceptance of 16 in a row is rare. */
#define SHOAL_DRAFT_MAX 16u
/* Drafted ids per step at most when a stream does not say. */
#define SHOAL_DRAFT_DEFAULT 8u

typedef struct shoal_draft_ctl {
	shoal_drafter dr; /* ops NULL: no speculation */
	int32_t *hist;    /* (cap) the prompt, then each token handed out */
	uint32_t n_hist, cap;
	uint32_t kmax, k;               /* ids per step: at most, now */
	int32_t draft[SHOAL_DRAFT_MAX]; /* the step in flight's */
	uint32_t n_draft;
	/* adaptation: a window of steps with drafts, and the pause after a
	 * window whose drafts did not pay (steps left, and the next length) */
	uint32_t win_steps, win_drafted, win_kept;
	uint64_t win_ns, win_tokens;    /* the window's step time and tokens */
	int64_t win_min_loss;           /* its least step time beyond the tokens' plain, ns */
	uint64_t win_draft_ns;          /* its time spent proposing */
	uint64_t plain_ns, plain_steps; /* steps without drafts: time, count */
	uint32_t pause, backoff;
	uint64_t t0; /* when the step in flight went out */
} shoal_draft_ctl;

/* Take drafter dr (ops may be NULL: off) for a session of prompt[n]
 * that generates up to max_tokens ids, kmax per step (0: the default).
 * NOMEM: dr freed, nothing held. */
shoal_err shoal_draft_ctl_init(shoal_draft_ctl *sp, shoal_drafter dr, uint32_t kmax,
                               const int32_t *prompt, uint32_t n_prompt, uint32_t max_tokens);
void shoal_draft_ctl_fini(shoal_draft_ctl *sp);
/* A token handed out (it joins the history the drafter reads). */
void shoal_draft_ctl_token(shoal_draft_ctl *sp, int32_t id);
/* The prompt is on its way: the drafter may take in the history now
 * (draft.h's prepare), off the decode steps. */
void shoal_draft_ctl_prepare(shoal_draft_ctl *sp);
/* Whether the next shoal_draft_ctl_plan asks the drafter (false while
 * drafting pauses or is off): a drafter whose state must follow every
 * token (the MTP layer) may defer its work while it is false. */
bool shoal_draft_ctl_will_draft(const shoal_draft_ctl *sp);
/* The drafts of the next step, at most room of them (the rows and
 * positions left): sp->n_draft, in sp->draft; t0 the step's start. */
uint32_t shoal_draft_ctl_plan(shoal_draft_ctl *sp, uint32_t room, uint64_t t0);
/* The drafter's proposal of the step in flight ended at now: the time it
 * took (from shoal_draft_ctl_plan's t0) tells an expensive drafter from the
 * noise of a cheap one's rows. Optional. */
void shoal_draft_ctl_planned(shoal_draft_ctl *sp, uint64_t now);
/* The step in flight ended at now with `kept` drafts kept: the drafter
 * hears, the length adapts. true: drafting pauses from here (it did not
 * pay). */
bool shoal_draft_ctl_done(shoal_draft_ctl *sp, uint32_t kept, uint64_t now);

#endif
