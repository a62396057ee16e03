/*
 * runtime/engine/generate.c: the generation path of generate.h: the
 * step/stop state machine, sampling one step, and the one-stage generator
 * over a whole-model engine.
 *
 * Part: runtime/ (engine). Divisions: the sequence, sampling one step, the
 * generator (creation, prefill, decode).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/engine/generate.h"

#include "base/assert.h"
#include "base/clock.h"
#include "runtime/engine/mtp.h"

/* ---- the sequence ---------------------------------------------------------- */

void shoal_gen_seq_init(shoal_gen_seq *q, uint32_t n_prompt, const shoal_gen_limits *lim)
{
	SHOAL_ASSERT(q && lim && n_prompt >= 1);
	q->n_prompt = n_prompt;
	q->lim = *lim;
	q->step = 0;
	q->stop = lim->max_tokens ? SHOAL_GEN_STOP_NONE : SHOAL_GEN_STOP_MAX;
}

uint32_t shoal_gen_seq_chunk(const shoal_gen_seq *q, uint32_t p0, uint32_t max_rows)
{
	if (p0 >= q->n_prompt)
		return 0;
	return q->n_prompt - p0 < max_rows ? q->n_prompt - p0 : max_rows;
}

uint32_t shoal_gen_seq_pos(const shoal_gen_seq *q)
{
	return shoal_gen_pos_of_step(q->n_prompt, q->step);
}

uint32_t shoal_gen_seq_step(const shoal_gen_seq *q)
{
	return q->step;
}

shoal_gen_stop shoal_gen_seq_stop(const shoal_gen_seq *q)
{
	return q->stop;
}

shoal_gen_stop shoal_gen_seq_accept(shoal_gen_seq *q, int32_t id)
{
	SHOAL_ASSERT(q->stop == SHOAL_GEN_STOP_NONE);
	q->step++;
	if (q->lim.eog && shoal_tokenizer_is_eog(q->lim.eog, id))
		q->stop = SHOAL_GEN_STOP_EOG;
	return q->stop;
}

shoal_gen_stop shoal_gen_seq_next(shoal_gen_seq *q, bool caller_stop)
{
	if (q->stop != SHOAL_GEN_STOP_NONE)
		return q->stop;
	if (caller_stop)
		q->stop = SHOAL_GEN_STOP_CALLER;
	else if (q->step >= q->lim.max_tokens)
		q->stop = SHOAL_GEN_STOP_MAX;
	else if (q->lim.n_ctx && (uint64_t)q->n_prompt + q->step >= q->lim.n_ctx)
		q->stop = SHOAL_GEN_STOP_CTX;
	return q->stop;
}

/* ---- sampling one step ---------------------------------------------------------- */

int32_t shoal_gen_pick(shoal_sampler *s, const float *logits, uint32_t n_vocab, const int32_t *hist,
                       size_t n_hist, uint32_t step, const shoal_sampler_filter *f, float *lp,
                       uint32_t k, int32_t *top_ids, float *top_lps)
{
	int32_t id = shoal_sampler_sample_filtered(s, logits, hist, n_hist, step, f);
	if (id < 0)
		return id;
	if (lp)
		shoal_logprobs_top(logits, n_vocab, id, lp, k, top_ids, top_lps);
	return id;
}

/* ---- the generator ------------------------------------------------------------ */

struct shoal_gen {
	shoal_engine *e;
	shoal_gen_config cfg;
	shoal_sampler *smp;
	uint32_t slot, R, n_vocab, n_ctx;
	int32_t *hist;       /* (n_ctx + 1) the prompt, then the tokens handed out */
	int32_t *rows_tok;   /* (1 + draft rows) the fed token, then the drafts */
	uint32_t n_lrows;    /* rows of logits */
	uint32_t n_draft;    /* drafted ids a step may carry: 0 without cfg.speculate */
	uint32_t *rows_sess; /* (R) the slot */
	uint32_t *rows_pos;  /* (R) */
	uint8_t *rows_want;  /* (R) */
	float *logits;       /* (R with prompt_logits, else 1; n_vocab) */
	/* an MTP drafter's rows (runtime/engine/mtp.h): the latest run's
	 * final hidden states, and its rows not yet pushed (their next id is
	 * the token handed out next): from position pend_pos, pend_n of them,
	 * from row pend_row of hid */
	float *hid; /* (R, n_embd) with cfg.speculate */
	uint32_t pend_pos, pend_n, pend_row;
	int32_t top_ids[SHOAL_GEN_MAX_LOGPROBS];
	float top_lps[SHOAL_GEN_MAX_LOGPROBS];
	bool slot_open;
};

/* CPU time of the whole process (base/clock.h gives wall time). */
static uint64_t gen_cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void shoal_gen_free(shoal_gen *g)
{
	if (!g)
		return;
	if (g->slot_open)
		shoal_engine_session_close(g->e, g->slot);
	shoal_sampler_free(g->smp);
	free(g->hist);
	free(g->rows_tok);
	free(g->rows_sess);
	free(g->rows_pos);
	free(g->rows_want);
	free(g->logits);
	free(g->hid);
	free(g);
}

shoal_err shoal_gen_new(shoal_engine *e, const shoal_gen_config *cfg, shoal_gen **out, char *why,
                        size_t why_len)
{
	*out = NULL;
	if (cfg->n_top > SHOAL_GEN_MAX_LOGPROBS || (cfg->n_top && !cfg->logprob))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "top logprobs: 0..%u, and only with logprobs",
		                 SHOAL_GEN_MAX_LOGPROBS);
	const shoal_model *m = shoal_engine_model(e);
	if (cfg->n_top > m->hp.n_vocab)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "%u top logprobs of %u tokens",
		                 cfg->n_top, m->hp.n_vocab);
	shoal_gen *g = calloc(1, sizeof *g);
	if (!g)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	g->e = e;
	g->cfg = *cfg;
	g->R = shoal_engine_max_rows(e);
	g->n_ctx = shoal_engine_n_ctx(e);
	g->n_vocab = m->hp.n_vocab;
	/* a step's drafts: as many as a run's rows leave */
	g->n_draft = cfg->speculate ? (g->R - 1 < SHOAL_DRAFT_MAX ? g->R - 1 : SHOAL_DRAFT_MAX) : 0;
	g->n_lrows = cfg->prompt_logits ? g->R : 1;
	if (g->n_lrows < 1 + g->n_draft)
		g->n_lrows = 1 + g->n_draft;
	size_t n_logits = (size_t)g->n_lrows * g->n_vocab;
	shoal_err err = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	g->hist = malloc(((size_t)g->n_ctx + 1) * sizeof *g->hist);
	g->rows_tok = malloc((1 + g->n_draft) * sizeof *g->rows_tok);
	g->rows_sess = malloc(g->R * sizeof *g->rows_sess);
	g->rows_pos = malloc(g->R * sizeof *g->rows_pos);
	g->rows_want = malloc(g->R);
	g->logits = malloc(n_logits * sizeof *g->logits);
	if (cfg->speculate)
		g->hid = malloc((size_t)g->R * m->hp.n_embd * sizeof *g->hid);
	if (!g->hist || !g->rows_tok || !g->rows_sess || !g->rows_pos || !g->rows_want ||
	    !g->logits || (cfg->speculate && !g->hid))
		goto fail;
	if ((err = shoal_sampler_new(&cfg->sampler, g->n_vocab, &g->smp))) {
		shoal_why(why, why_len, err, "%s",
		          err == SHOAL_ERR_NOMEM ? "out of memory"
		                                 : "sampler parameters out of range");
		goto fail;
	}
	if ((err = shoal_engine_session_open(e, &g->slot))) {
		shoal_why(why, why_len, err, "no engine session free");
		goto fail;
	}
	g->slot_open = true;
	for (uint32_t r = 0; r < g->R; r++)
		g->rows_sess[r] = g->slot;
	*out = g;
	return SHOAL_OK;
fail:
	shoal_gen_free(g);
	return err;
}

/* Rows of hid from row that the MTP layer takes once the next token is
 * handed out (positions pos..pos + n - 1). */
static void gen_pend(shoal_gen *g, uint32_t pos, uint32_t n, uint32_t row)
{
	g->pend_pos = pos;
	g->pend_n = n;
	g->pend_row = row;
}

/* Prefill rq's prompt in chunks of R rows. Wanted logits: the scored range
 * (handed to on_logits) and, when sampling follows, the last prompt row;
 * *last points at the latter's. */
static shoal_err gen_prefill(shoal_gen *g, const shoal_gen_request *rq, const shoal_gen_seq *q,
                             shoal_drafter *mtp, const float **last, char *why, size_t why_len)
{
	bool sample = shoal_gen_seq_stop(q) == SHOAL_GEN_STOP_NONE;
	uint32_t n;
	for (uint32_t p0 = 0; (n = shoal_gen_seq_chunk(q, p0, g->R)); p0 += n) {
		uint32_t nl = 0;
		for (uint32_t r = 0; r < n; r++) {
			uint32_t p = p0 + r;
			g->rows_pos[r] = p;
			g->rows_want[r] = (p >= rq->score_from && p < rq->score_to) ||
			                  (sample && p + 1 == rq->n_prompt);
			nl += g->rows_want[r];
		}
		shoal_engine_batch b = {.n_rows = n,
		                        .tokens = rq->prompt + p0,
		                        .session = g->rows_sess,
		                        .pos = g->rows_pos,
		                        .want_logits = g->rows_want,
		                        .hidden_out = mtp ? g->hid : NULL,
		                        .logits = g->logits};
		shoal_err err = shoal_engine_run(g->e, &b, why, why_len);
		if (err)
			return err;
		/* the MTP layer takes the rows whose next id is the prompt's;
		 * the last prompt row's waits for the first token */
		bool end = p0 + n == rq->n_prompt;
		uint32_t known = end ? n - 1 : n;
		if (mtp && known &&
		    (err = shoal_mtp_drafter_push(mtp, p0, known, g->hid, rq->prompt + p0 + 1, why,
		                                  why_len)))
			return err;
		if (mtp && end)
			gen_pend(g, rq->n_prompt - 1, 1, n - 1);
		for (uint32_t r = 0, j = 0; r < n && j < nl; r++) {
			if (!g->rows_want[r])
				continue;
			const float *lg = g->logits + (size_t)j++ * g->n_vocab; /* (n_vocab) */
			uint32_t p = p0 + r;
			if (p >= rq->score_from && p < rq->score_to)
				rq->on_logits(rq->ctx, p, lg);
			if (p + 1 == rq->n_prompt)
				*last = lg;
		}
	}
	return SHOAL_OK;
}

/* One run's decoding state: the sequence, the history, the token. */
typedef struct gen_dec {
	shoal_gen_seq q;
	size_t n_hist;
	float lp;
	shoal_gen_token t;
} gen_dec;

/* Sample the token of the current step from logits (or take id, sampled
 * from them already with its logprob in d->lp and its best in g's
 * arrays), hand it out; false: the run stops here. */
static bool gen_hand_out(shoal_gen *g, const shoal_gen_request *rq, shoal_gen_stats *st, gen_dec *d,
                         shoal_draft_ctl *dc, const float *logits, bool have, int32_t id)
{
	d->t.step = shoal_gen_seq_step(&d->q);
	d->t.id = have ? id
	               : shoal_gen_pick(g->smp, logits, g->n_vocab, g->hist, d->n_hist, d->t.step,
	                                NULL, g->cfg.logprob ? &d->lp : NULL, g->cfg.n_top,
	                                g->top_ids, g->top_lps);
	if (shoal_gen_seq_accept(&d->q, d->t.id) != SHOAL_GEN_STOP_NONE)
		return false;
	d->t.logprob = d->lp;
	g->hist[d->n_hist++] = d->t.id;
	shoal_draft_ctl_token(dc, d->t.id);
	st->tokens++;
	int stop = rq->on_token ? rq->on_token(rq->ctx, &d->t) : 0;
	return shoal_gen_seq_next(&d->q, stop) == SHOAL_GEN_STOP_NONE;
}

/* Feed the token just handed out plus the drafts planned for it at the
 * current position, in one engine run; *nd: the drafts. */
static shoal_err gen_feed(shoal_gen *g, gen_dec *d, shoal_draft_ctl *dc, shoal_drafter *mtp,
                          uint64_t t0, uint32_t *nd, char *why, size_t why_len)
{
	/* the MTP layer first takes the rows the token just handed out
	 * follows: its guess is the draft after it; while drafting pauses
	 * no guess is wanted, and the rows wait to run as one batch */
	if (mtp && g->pend_n) {
		shoal_mtp_drafter_defer(mtp, !shoal_draft_ctl_will_draft(dc));
		shoal_err err = shoal_mtp_drafter_push(
		    mtp, g->pend_pos, g->pend_n,
		    g->hid + (size_t)g->pend_row * shoal_engine_model(g->e)->hp.n_embd,
		    g->hist + g->pend_pos + 1, why, why_len);
		g->pend_n = 0;
		if (err)
			return err;
	}
	uint32_t pos = shoal_gen_seq_pos(&d->q), step = shoal_gen_seq_step(&d->q);
	/* drafts never reach past max_tokens or the context */
	uint32_t room = g->n_draft, left = d->q.lim.max_tokens - step - 1;
	if (left < room)
		room = left;
	if (g->n_ctx - 1 - pos < room)
		room = g->n_ctx - 1 - pos;
	*nd = shoal_draft_ctl_plan(dc, room, t0);
	shoal_draft_ctl_planned(dc, shoal_clock_monotonic_ns());
	g->rows_tok[0] = d->t.id;
	for (uint32_t j = 0; j <= *nd; j++) {
		if (j)
			g->rows_tok[j] = dc->draft[j - 1];
		g->rows_pos[j] = pos + j;
		g->rows_want[j] = 1;
	}
	shoal_engine_batch b = {.n_rows = 1 + *nd,
	                        .tokens = g->rows_tok,
	                        .session = g->rows_sess,
	                        .pos = g->rows_pos,
	                        .want_logits = g->rows_want,
	                        .hidden_out = mtp ? g->hid : NULL,
	                        .logits = g->logits};
	return shoal_engine_run(g->e, &b, why, why_len);
}

/* shoal_gen_run with the stream's speculation dc (off: no drafter). */
static shoal_err gen_run(shoal_gen *g, const shoal_gen_request *rq, shoal_gen_stats *st,
                         shoal_draft_ctl *dc, char *why, size_t why_len)
{
	bool scored = rq->score_from < rq->score_to;
	if (!rq->n_prompt || rq->n_prompt > g->n_ctx)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "a prompt of %u tokens, context %u",
		                 rq->n_prompt, g->n_ctx);
	if (scored && (!g->cfg.prompt_logits || !rq->on_logits))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "scoring the prompt needs prompt_logits and on_logits");
	gen_dec d = {.t = {.n_top = g->cfg.n_top, .top_ids = g->top_ids, .top_lps = g->top_lps}};
	shoal_gen_seq_init(
	    &d.q, rq->n_prompt,
	    &(shoal_gen_limits){.max_tokens = rq->max_tokens, .n_ctx = g->n_ctx, .eog = rq->eog});
	shoal_engine_session_reset(g->e, g->slot);
	/* an MTP drafter is pushed the kept rows' hidden states (mtp.h) */
	shoal_drafter *mtp = shoal_mtp_drafter_is(&dc->dr) ? &dc->dr : NULL;
	g->pend_n = 0;

	uint64_t t0 = shoal_clock_monotonic_ns();
	const float *logits = g->logits; /* (n_vocab) the latest row to sample */
	shoal_err err = gen_prefill(g, rq, &d.q, mtp, &logits, why, why_len);
	if (err)
		return err;
	uint64_t t1 = shoal_clock_monotonic_ns(), t_end = t1;
	uint64_t c1 = gen_cpu_ns(), c_end = c1;
	st->prefill_ns = t1 - t0;
	st->decode_best_ns = UINT64_MAX;

	memcpy(g->hist, rq->prompt, (size_t)rq->n_prompt * sizeof *g->hist);
	d.n_hist = rq->n_prompt;
	bool go = shoal_gen_seq_stop(&d.q) == SHOAL_GEN_STOP_NONE;
	while (go) {
		uint64_t ts = shoal_clock_monotonic_ns();
		if (!gen_hand_out(g, rq, st, &d, dc, logits, false, 0))
			break;
		uint32_t nd;
		if ((err = gen_feed(g, &d, dc, mtp, ts, &nd, why, why_len)))
			break;
		logits = g->logits;
		/* the drafts kept: each equal to the token its row before gives */
		uint32_t kept = 0;
		for (; go && kept < nd; kept++) {
			const float *lg = g->logits + (size_t)kept * g->n_vocab; /* (n_vocab) */
			int32_t id = shoal_gen_pick(g->smp, lg, g->n_vocab, g->hist, d.n_hist,
			                            shoal_gen_seq_step(&d.q), NULL,
			                            g->cfg.logprob ? &d.lp : NULL, g->cfg.n_top,
			                            g->top_ids, g->top_lps);
			if (id != dc->draft[kept]) {
				logits = lg; /* its token, sampled again: the same draw */
				break;
			}
			go = gen_hand_out(g, rq, st, &d, dc, lg, true, id);
			logits = lg + g->n_vocab;
		}
		/* rows pos..pos + kept are kept: the MTP layer takes them when
		 * the token after the last is handed out */
		gen_pend(g, shoal_gen_seq_pos(&d.q) - kept, kept + 1, 0);
		st->drafted += nd;
		st->accepted += kept;
		t_end = shoal_clock_monotonic_ns();
		c_end = gen_cpu_ns();
		shoal_draft_ctl_done(dc, kept, t_end);
		st->decode_runs++;
		if (t_end - ts < st->decode_best_ns)
			st->decode_best_ns = t_end - ts;
	}
	st->stop = shoal_gen_seq_stop(&d.q);
	st->decode_ns = t_end - t1;
	st->decode_cpu_ns = c_end - c1;
	if (!st->decode_runs)
		st->decode_best_ns = 0;
	return err;
}

shoal_err shoal_gen_run(shoal_gen *g, const shoal_gen_request *rq, shoal_gen_stats *st, char *why,
                        size_t why_len)
{
	shoal_gen_stats dummy;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof *st);
	shoal_draft_ctl dc;
	if (rq->drafter.ops && !g->n_draft) {
		if (rq->drafter.ops->free)
			rq->drafter.ops->free(rq->drafter.self);
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "a drafter needs a generator made for speculation");
	}
	if (shoal_draft_ctl_init(&dc, rq->drafter, rq->draft_max, rq->prompt, rq->n_prompt,
	                         rq->max_tokens))
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	shoal_err err = gen_run(g, rq, st, &dc, why, why_len);
	shoal_draft_ctl_fini(&dc);
	return err;
}
