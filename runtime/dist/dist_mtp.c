/*
 * runtime/dist/dist_mtp.c: the last stage's side of MTP speculation (dist.h
 * "Speculation"): DeepSeek's MTP layer (runtime/engine/mtp.h) run over the
 * rows a session keeps, and its guess at the token after, which goes back
 * to the owner with the step's results.
 *
 * Part: runtime/ (distributed inference). The layer needs, for each kept
 * position p, the final hidden state there (the engine's hidden_out on the
 * last stage) and the token at p + 1: a prompt row's comes from the OPEN's
 * tail (the last SHOAL_DIST_TAIL_MAX prompt ids; an earlier one is not
 * known and its embedding is zeroed, which only dulls the guesses), a
 * sampled row's is its own choice. Which rows of a step are kept the stage
 * tells itself: an MTP session's owner drafts only the guess the stage sent
 * with the step before, so the step's second row is kept iff that guess
 * equals the first row's choice, and no later row is ever a draft of
 * ours. A guess only decides how many rows the next step verifies: the
 * tokens are those of a run without it whatever the layer computes.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "runtime/dist/dist_impl.h"

#define LOG_PART "dist"

/* The stage's MTP layer, made at the first session that asks for it, on
 * the backend of the engine that holds the head (a stage split across
 * devices: the CPU part's), where the hidden states it reads come from. */
static shoal_err mtp_layer(shoal_dist_stage *s, char *why, size_t why_len)
{
	if (s->mtp)
		return SHOAL_OK;
	shoal_engine_config c = shoal_engine_config_default(s->m);
	c.backend = shoal_engine_backend_ops(s->e2 ? s->e2 : s->e);
	c.n_threads = s->cfg.n_threads;
	c.n_ctx = shoal_engine_n_ctx(s->e);
	c.max_sessions = s->cfg.max_sessions;
	c.max_rows = s->R;
	c.tensor_held = s->cfg.tensor_held;
	c.tensor_held_ctx = s->cfg.tensor_held_ctx;
	return shoal_mtp_new(s->m, &c, &s->mtp, why, why_len);
}

void dist__mtp_open(shoal_dist_stage *s, dist__sess *ss, const dist__ctl *c)
{
	ss->mtp = (shoal_drafter){0};
	ss->mtp_guess = -1;
	if (!c->want_mtp || !s->cfg.has_head)
		return;
	char w[SHOAL_WHY_LEN] = "";
	shoal_err e = mtp_layer(s, w, sizeof w);
	if (!e)
		e = shoal_mtp_drafter_new(s->mtp, &ss->mtp, w, sizeof w);
	if (e) { /* the session goes on without guesses: same tokens */
		ss->mtp = (shoal_drafter){0};
		SHOAL_LOG_W(LOG_PART, "session %016llx: no MTP guesses: %s",
		            (unsigned long long)ss->sid, w[0] ? w : shoal_strerror(e));
		return;
	}
	memcpy(ss->ptail, c->tail, (size_t)c->n_tail * 4u);
	ss->n_ptail = c->n_tail;
}

void dist__mtp_close(dist__sess *ss)
{
	if (ss->mtp.ops)
		ss->mtp.ops->free(ss->mtp.self);
	ss->mtp = (shoal_drafter){0};
}

/* The token at q + 1 of a prompt row at q (-1: before the tail). */
static int32_t mtp_prompt_next(const dist__sess *ss, uint32_t q)
{
	uint32_t first = ss->n_prompt - ss->n_ptail; /* the tail's first position */
	return q + 1 >= first ? ss->ptail[q + 1 - first] : -1;
}

/* Session si's rows in [r, end) of the run that started at r0 (hidden
 * states s->hout from r0): the kept ones into the layer. */
static void mtp_session(shoal_dist_stage *s, uint32_t si, uint32_t r, uint32_t end, uint32_t r0)
{
	dist__sess *ss = &s->sess[si];
	uint32_t n = 0, n_sampled = 0, q0 = s->pos[r];
	int32_t prev = -1; /* the latest sampled row's choice */
	for (uint32_t x = r; x < end; x++) {
		if (s->row_sess[x] != si)
			continue;
		uint32_t q = s->pos[x];
		int32_t next;
		if (q + 1 < ss->n_prompt) {
			next = mtp_prompt_next(ss, q);
		} else {
			/* a sampled row has its input right when it is the first
			 * of the step (a prompt id or the fed token), or the
			 * step's one draft, our guess, and the guess was chosen */
			if (n_sampled && (n_sampled > 1 || prev != ss->mtp_guess))
				break;
			if ((next = s->rchoice[x]) < 0)
				break;
			prev = next;
			n_sampled++;
		}
		memcpy(s->mtp_h + (size_t)n * s->d, s->hout + (size_t)(x - r0) * s->d,
		       (size_t)s->d * 4u);
		s->mtp_next[n++] = next;
	}
	char w[SHOAL_WHY_LEN] = "";
	shoal_err e =
	    n ? shoal_mtp_drafter_push(&ss->mtp, q0, n, s->mtp_h, s->mtp_next, w, sizeof w)
	      : SHOAL_OK;
	if (e) { /* out of step (a prefix-cache start, a failure): no more guesses */
		SHOAL_LOG_W(LOG_PART, "session %016llx: MTP guesses stop: %s",
		            (unsigned long long)ss->sid, w[0] ? w : shoal_strerror(e));
		dist__mtp_close(ss);
		ss->mtp_guess = -1;
		return;
	}
	if (n_sampled)
		ss->mtp_guess = shoal_mtp_drafter_guess(&ss->mtp);
}

_Static_assert(DIST__MAX_SESSIONS <= 64, "one bit per session in dist__mtp_run");

void dist__mtp_run(shoal_dist_stage *s, uint32_t r0, uint32_t n)
{
	uint64_t done = 0; /* sessions handled, a bit each */
	for (uint32_t r = r0; r < r0 + n; r++) {
		uint32_t si = s->row_sess[r];
		dist__sess *ss = &s->sess[si];
		if (!ss->mtp.ops || ss->failed || (done >> si & 1u))
			continue;
		done |= (uint64_t)1 << si;
		mtp_session(s, si, r, r0 + n, r0);
	}
}
