/*
 * runtime/engine/draft_ctl.c: one stream's speculation (draft_ctl.h): what
 * the drafter reads and proposes, and how many ids a step drafts.
 *
 * Part: runtime/ (engine). A drafter only changes speed:
 * the last stage keeps nothing of a draft but its own choices. So the
 * only question here is whether drafting pays. The draft length follows
 * the last step (longer after a step that kept every draft, one past the
 * kept ones after a miss). A stream's first steps go without drafts: the
 * time per token that drafted steps are held against. A window of steps
 * with drafts ends, and is judged, at the first of:
 *   1. its drafted steps so far kept nothing (SPEC_ZERO_STEPS of them);
 *   2. after SPEC_ZERO_STEPS steps or more, its tokens took more than
 *      SPEC_LOSS_MAX steps' time longer than the same tokens without
 *      drafts (an expensive drafter stops after its first two steps);
 *   3. SPEC_WINDOW steps: judged by time per token against the steps
 *      without drafts, and never paying below SPEC_MIN_RATE kept.
 * A window that did not pay pauses drafting for a number of steps that
 * doubles with each such window in a row and is at least what keeps the
 * window's lost time under SPEC_LOSS_SHARE of the pause's, so a session
 * whose drafts are poor runs as without a drafter but for a short probe
 * now and then, however costly its drafter's steps.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/draft_ctl.h"

/* Steps with drafts per judgement: few enough to react within a reply's
 * first 100 tokens, enough that one lucky step does not decide. */
#define SPEC_WINDOW 12u
/* Steps without drafts after a window that did not pay: first, at most.
 * 8 first: a cheap drafter's probe (prompt lookup: 2 steps of a row or
 * two more) costs little, and a reply that starts unlike its prompt and
 * then copies it (a passage to repeat) loses little speculation; an
 * expensive drafter's pauses follow its loss (SPEC_LOSS_SHARE). With 32,
 * spec_bench's repeat prompt kept ~10% fewer drafts. */
#define SPEC_PAUSE     8u
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
/* Rule 1: drafted steps in a row that kept nothing end a window. Two: the
 * first step drafts SPEC_K_FIRST ids and the next one after a miss, so a
 * drafter keeping 60% fails both 16% of the time (and then only pauses),
 * one keeping under 20% two times in three. */
#define SPEC_ZERO_STEPS 2u
/* Rule 2: a window's lost time, in steps without drafts, that ends it
 * after SPEC_ZERO_STEPS steps or more. One step: a draft model about as
 * slow as the target (any draft with the vocabulary of a small model whose
 * head is most of its weights) loses more than that in its first step of 2
 * drafts unless both are kept, while a window that pays gains from its
 * first steps on. Not after one step: a stream's first step with drafts
 * may stall (the first multi-row run of an engine took 20 ms against
 * 0.7 ms a step on the bundled dense model). */
#define SPEC_LOSS_MAX 1.0
/* A pause after a window whose every step lost time is at least that loss
 * (the least step's times the steps: one stall does not count), or the
 * window's time spent drafting if less (prompt lookup's is a few us: its
 * lost time is its rows', and noise), over SPEC_LOSS_SHARE: probes of an
 * expensive drafter that never pays cost 2% of the stream. */
#define SPEC_LOSS_SHARE 0.02
/* The draft length of a window's first step: short, since what it costs is
 * unknown (a draft model's step grows with it); +2 a step while every draft
 * is kept reaches 8 in 3 steps. */
#define SPEC_K_FIRST 2u
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
	sp->k = sp->kmax < SPEC_K_FIRST ? sp->kmax : SPEC_K_FIRST;
	sp->backoff = SPEC_PAUSE;
	sp->win_min_loss = INT64_MAX;
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

void shoal_draft_ctl_prepare(shoal_draft_ctl *sp)
{
	if (sp->dr.ops && sp->dr.ops->prepare && sp->n_hist < sp->cap)
		sp->dr.ops->prepare(sp->dr.self, sp->hist, sp->n_hist);
}

bool shoal_draft_ctl_will_draft(const shoal_draft_ctl *sp)
{
	return sp->dr.ops && sp->n_hist < sp->cap && !sp->pause;
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

void shoal_draft_ctl_planned(shoal_draft_ctl *sp, uint64_t now)
{
	if (sp->n_draft && now > sp->t0)
		sp->win_draft_ns += now - sp->t0;
}

/* Time per token without drafts, in ns (0: not known yet). */
static double plain_per_token(const shoal_draft_ctl *sp)
{
	return sp->plain_steps >= SPEC_PLAIN_MIN ? (double)sp->plain_ns / (double)sp->plain_steps
	                                         : 0.0;
}

/* The window's time beyond its tokens' without drafts, in ns (negative:
 * it gained; 0 where there is nothing to time it against). */
static double window_loss(const shoal_draft_ctl *sp)
{
	double plain = plain_per_token(sp);
	return plain > 0 ? (double)sp->win_ns - plain * (double)sp->win_tokens : 0.0;
}

/* Whether the window's drafts paid. */
static bool window_paid(const shoal_draft_ctl *sp)
{
	double rate = (double)sp->win_kept / (double)sp->win_drafted;
	if (rate < SPEC_MIN_RATE)
		return false;
	/* time per token, with drafts and without (shoal_draft_ctl_done
	 * takes steps without drafts before a window is judged) */
	return plain_per_token(sp) > 0 && window_loss(sp) < 0;
}

/* Why the window ends after this step: 0 it goes on, 1 nothing kept in
 * a row, 2 time lost, 3 its length (the numbers of the rules above). */
static int window_end(const shoal_draft_ctl *sp)
{
	if (!sp->win_kept && sp->win_steps >= SPEC_ZERO_STEPS)
		return 1;
	double plain = plain_per_token(sp);
	if (plain > 0 && sp->win_steps >= SPEC_ZERO_STEPS &&
	    window_loss(sp) > SPEC_LOSS_MAX * plain)
		return 2;
	return sp->win_steps >= SPEC_WINDOW ? 3 : 0;
}

static void window_reset(shoal_draft_ctl *sp)
{
	sp->win_steps = sp->win_drafted = sp->win_kept = 0;
	sp->win_ns = sp->win_tokens = sp->win_draft_ns = 0;
	sp->win_min_loss = INT64_MAX;
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
	double plain = plain_per_token(sp);
	if (plain > 0) {
		double l = (double)dt - plain * (double)(kept + 1);
		if (l < (double)sp->win_min_loss)
			sp->win_min_loss = (int64_t)l;
	}
	int end = window_end(sp);
	if (!end)
		return false;
	if (end == 3 && sp->plain_steps < SPEC_PLAIN_MIN &&
	    (double)sp->win_kept >= SPEC_MIN_RATE * (double)sp->win_drafted) {
		/* nothing to time it against: a few steps without drafts
		 * first (not a pause: the next window is judged by time) */
		sp->pause = SPEC_PLAIN_MIN - (uint32_t)sp->plain_steps;
		window_reset(sp);
		return false;
	}
	bool paid = end == 3 && window_paid(sp);
	double loss = plain > 0 && sp->win_min_loss != INT64_MAX
	                  ? (double)sp->win_min_loss * (double)sp->win_steps
	                  : 0.0;
	if (loss > (double)sp->win_draft_ns)
		loss = (double)sp->win_draft_ns;
	window_reset(sp);
	if (paid) {
		sp->backoff = SPEC_PAUSE;
		return false;
	}
	/* the pause: the backoff, or longer where the window lost more */
	double need = plain > 0 && loss > 0 ? loss / (SPEC_LOSS_SHARE * plain) : 0.0;
	sp->pause = need > (double)sp->backoff
	                ? (need < (double)SPEC_PAUSE_MAX ? (uint32_t)need : SPEC_PAUSE_MAX)
	                : sp->backoff;
	sp->backoff = sp->backoff * 2 < SPEC_PAUSE_MAX ? sp->backoff * 2 : SPEC_PAUSE_MAX;
	sp->k = sp->kmax < SPEC_K_FIRST ? sp->kmax : SPEC_K_FIRST;
	return true;
}
