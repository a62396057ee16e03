/*
 * runtime/engine/draft_ctl.c: one stream's speculation (draft_ctl.h): what
 * the drafter reads and proposes, and how many ids a step drafts.
 *
 * Part: runtime/ (engine). A drafter only changes speed:
 * the last stage keeps nothing of a draft but its own choices. So the
 * only question here is whether drafting pays. The draft length follows
 * the last step (longer after a step that kept every draft, one past the
 * kept ones after a miss). Every SPEC_WINDOW steps with drafts
 * are judged: against the time per token of the session's steps without
 * drafts (steps where the drafter had no guess, or, for a drafter that
 * always guesses, a few taken without drafts for this), or by their
 * acceptance alone where it is too low to pay (a window whose tokens take
 * 1.5 times as long as without drafts after 3 steps is judged then); a
 * window that did not pay pauses
 * drafting for a number of steps that doubles with each pause in a row,
 * so a session whose drafts are poor runs as without a drafter but for
 * one window now and then.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/draft_ctl.h"

/* Steps with drafts per judgement: few enough to react within a reply's
 * first 100 tokens, enough that one lucky step does not decide. */
#define SPEC_WINDOW 12u
/* Steps without drafts after a window that did not pay: first, at most. */
#define SPEC_PAUSE     32u
#define SPEC_PAUSE_MAX 1024u
/* Below this acceptance a window never pays, whatever its timing. */
#define SPEC_MIN_RATE 0.15
/* Steps without drafts to time a window against. A drafter that guesses
 * at every step (a draft model) leaves none: a stream takes this many
 * without drafts first (and again should it have fewer when a window
 * ends), so that a drafter whose guesses are kept but cost more than they
 * save (a draft model nearly as slow as the target) is judged by time
 * like any other. */
#define SPEC_PLAIN_MIN 4u
/* A window judged before its end: after this many steps with drafts, when
 * its time per token is this many times that without drafts. */
#define SPEC_EARLY_STEPS  3u
#define SPEC_EARLY_SLOWER 1.5
/* History the drafter reads at most past the prompt. */
#define SPEC_HIST_MAX 65536u

shoal_err shoal_draft_ctl_init(shoal_draft_ctl *sp, shoal_drafter dr, uint32_t kmax,
                               const int32_t *prompt, uint32_t n_prompt, uint32_t max_tokens)
{
	memset(sp, 0, sizeof *sp);
	if (!dr.ops)
		return SHOAL_OK;
	uint64_t cap =
	    (uint64_t)n_prompt + (max_tokens < SPEC_HIST_MAX ? max_tokens : SPEC_HIST_MAX);
	sp->hist = malloc((size_t)cap * sizeof *sp->hist);
	if (!sp->hist) {
		if (dr.ops->free)
			dr.ops->free(dr.self);
		return SHOAL_ERR_NOMEM;
	}
	sp->dr = dr;
	sp->cap = (uint32_t)cap;
	memcpy(sp->hist, prompt, (size_t)n_prompt * sizeof *sp->hist);
	sp->n_hist = n_prompt;
	sp->kmax = kmax ? kmax : SHOAL_DRAFT_DEFAULT;
	if (sp->kmax > SHOAL_DRAFT_MAX)
		sp->kmax = SHOAL_DRAFT_MAX;
	sp->k = sp->kmax < 4 ? sp->kmax : 4;
	sp->backoff = SPEC_PAUSE;
	/* the first steps go without drafts: the time the first window is
	 * judged against, so that an expensive drafter stops early */
	sp->pause = SPEC_PLAIN_MIN;
	return SHOAL_OK;
}

void shoal_draft_ctl_fini(shoal_draft_ctl *sp)
{
	if (sp->dr.ops && sp->dr.ops->free)
		sp->dr.ops->free(sp->dr.self);
	free(sp->hist);
	memset(sp, 0, sizeof *sp);
}

void shoal_draft_ctl_token(shoal_draft_ctl *sp, int32_t id)
{
	if (sp->hist && sp->n_hist < sp->cap)
		sp->hist[sp->n_hist++] = id;
}

uint32_t shoal_draft_ctl_plan(shoal_draft_ctl *sp, uint32_t room, uint64_t t0)
{
	sp->n_draft = 0;
	sp->t0 = t0;
	if (!sp->dr.ops || sp->n_hist == sp->cap) /* off, or its history no longer whole */
		return 0;
	if (sp->pause) {
		sp->pause--;
		return 0;
	}
	uint32_t k = sp->k < room ? sp->k : room;
	if (!k)
		return 0;
	size_t n = sp->dr.ops->propose(sp->dr.self, sp->hist, sp->n_hist, sp->draft, k);
	sp->n_draft = n < k ? (uint32_t)n : k;
	return sp->n_draft;
}

/* Whether the window's drafts paid. */
static bool window_paid(const shoal_draft_ctl *sp)
{
	double rate = (double)sp->win_kept / (double)sp->win_drafted;
	if (rate < SPEC_MIN_RATE)
		return false;
	/* time per token, with drafts and without (shoal_draft_ctl_done
	 * takes steps without drafts before a window is judged) */
	return sp->plain_steps >= SPEC_PLAIN_MIN &&
	       (double)sp->win_ns / (double)sp->win_tokens <
	           (double)sp->plain_ns / (double)sp->plain_steps;
}

bool shoal_draft_ctl_done(shoal_draft_ctl *sp, uint32_t kept, uint64_t now)
{
	if (!sp->dr.ops)
		return false;
	uint64_t dt = now > sp->t0 ? now - sp->t0 : 0;
	if (!sp->n_draft) { /* a plain step: the time to compare with, recent ones weigh most */
		if (sp->plain_steps >= 64) {
			sp->plain_ns /= 2;
			sp->plain_steps /= 2;
		}
		sp->plain_ns += dt;
		sp->plain_steps++;
		return false;
	}
	if (kept > sp->n_draft)
		kept = sp->n_draft;
	if (sp->dr.ops->feedback)
		sp->dr.ops->feedback(sp->dr.self, sp->n_draft, kept);
	if (kept == sp->n_draft)
		sp->k = sp->k + 2 < sp->kmax ? sp->k + 2 : sp->kmax;
	else
		sp->k = kept + 1;
	sp->win_steps++;
	sp->win_drafted += sp->n_draft;
	sp->win_kept += kept;
	sp->win_ns += dt;
	sp->win_tokens += kept + 1;
	sp->n_draft = 0;
	/* a window whose tokens already take far longer than without drafts
	 * (an expensive drafter) is judged at once, not after SPEC_WINDOW */
	bool slow = sp->win_steps >= SPEC_EARLY_STEPS && sp->plain_steps >= SPEC_PLAIN_MIN &&
	            (double)sp->win_ns * (double)sp->plain_steps >
	                SPEC_EARLY_SLOWER * (double)sp->plain_ns * (double)sp->win_tokens;
	if (sp->win_steps < SPEC_WINDOW && !slow)
		return false;
	if (sp->plain_steps < SPEC_PLAIN_MIN &&
	    (double)sp->win_kept >= SPEC_MIN_RATE * (double)sp->win_drafted) {
		/* nothing to time it against: a few steps without drafts
		 * first (not a pause: the next window is judged by time) */
		sp->pause = SPEC_PLAIN_MIN - (uint32_t)sp->plain_steps;
		sp->win_steps = sp->win_drafted = sp->win_kept = 0;
		sp->win_ns = sp->win_tokens = 0;
		return false;
	}
	bool paid = window_paid(sp);
	sp->win_steps = sp->win_drafted = sp->win_kept = 0;
	sp->win_ns = sp->win_tokens = 0;
	if (paid) {
		sp->backoff = SPEC_PAUSE;
		return false;
	}
	sp->pause = sp->backoff;
	sp->backoff = sp->backoff * 2 < SPEC_PAUSE_MAX ? sp->backoff * 2 : SPEC_PAUSE_MAX;
	sp->k = sp->kmax < 2 ? sp->kmax : 2;
	return true;
}
