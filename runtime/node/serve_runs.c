/*
 * runtime/node/serve_runs.c: run slots: a request queued (any thread), then
 * started, paused and replayed, checked and ended by the data thread
 * (DESIGN.md section 5: a run paused by a plan change replays its history
 * on the next servable plan). A token goes from the data thread to its
 * client: an API run's straight into its sink, a control-plane run's
 * through the event ring to the node thread (serve_clients.c).
 *
 * Divisions: the queue; events and tokens; the data thread's runs.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

/* --------------------------------------------------------------- the queue */

/* Queue a run of (*ids)[n_ids] (taken: *ids is NULL after) for max tokens
 * n (> 0), answering to the client `from` (seq) or, with sink, to it;
 * special: its text shows control tokens (an API run with tools).
 * *slot names it. BUSY when every slot is taken. Any thread. */
shoal_err serve__queue(shoal_serve *cl, int32_t **ids, size_t n_ids, uint32_t n, uint32_t k,
                       bool no_logprob, bool special, int spec, const shoal_sampler_params *sp,
                       const shoal_ctl_route *from, uint64_t seq, const shoal_api_sink *sink,
                       uint32_t *slot_out, char *why, size_t why_len)
{
	uint32_t max_tokens = n;
	if (max_tokens > cl->pol.ctx - n_ids)
		max_tokens = cl->pol.ctx - (uint32_t)n_ids;
	/* room for the tokens it will stream: the history a replay feeds */
	int32_t *hist = realloc(*ids, (n_ids + max_tokens) * sizeof **ids);
	if (!hist)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	*ids = hist;
	/* the run's own copy of a grammar (structured output; the OPEN and
	 * every replay carry it) */
	uint32_t *gram = NULL;
	if (sp->n_grammar) {
		if (!(gram = malloc((size_t)sp->n_grammar * sizeof *gram)))
			return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
		memcpy(gram, sp->grammar, (size_t)sp->n_grammar * sizeof *gram);
	}
	pthread_mutex_lock(&cl->mu);
	size_t slot = SHOAL_SERVE_MAX_RUNS;
	for (size_t i = 0; i < SHOAL_SERVE_MAX_RUNS && slot == SHOAL_SERVE_MAX_RUNS; i++)
		if (cl->runs[i].state == SHOAL_SERVE_RUN_FREE)
			slot = i;
	if (slot < SHOAL_SERVE_MAX_RUNS) {
		shoal_serve_run *r = &cl->runs[slot];
		uint32_t gen = serve__handle_gen(serve__handle(0, r->gen + 1)); /* wraps */
		free(r->prompt);
		free(r->grammar);
		memset(r, 0, sizeof *r);
		r->gen = gen;
		if (from) {
			r->route = *from;
			r->route.endpoint = NULL;
		} else {
			r->route.fd = -1;
			r->sink = *sink;
			r->has_sink = true;
		}
		r->seq = seq;
		r->prompt = *ids;
		*ids = NULL;
		r->n_prompt = (uint32_t)n_ids;
		r->max_tokens = max_tokens;
		r->logprobs = k;
		r->no_logprob = no_logprob;
		r->spec = spec;
		r->sp = *sp;
		r->sp.grammar = r->grammar = gram;
		gram = NULL;
		r->ticket = ++cl->next_ticket;
		r->queued_us = shoal_clock_now_us();
		shoal_detok_init(&r->dt, cl->tok, special);
		r->dt.first = false;
		r->n_sent = 0;
		r->state = SHOAL_SERVE_RUN_QUEUED;
		*slot_out = serve__handle((uint32_t)slot, gen);
	}
	pthread_mutex_unlock(&cl->mu);
	free(gram); /* no slot took it */
	if (slot == SHOAL_SERVE_MAX_RUNS)
		return shoal_why(why, why_len, SHOAL_ERR_BUSY,
		                 "busy: this peer holds %u requests (running and queued)",
		                 SHOAL_SERVE_MAX_RUNS);
	serve__wake(cl);
	return SHOAL_OK;
}

/* ------------------------------------------------------- events and tokens */

/* Run r's slot is free again (its end was told): the thread that told it. */
void serve__free_run(shoal_serve *cl, shoal_serve_run *r)
{
	pthread_mutex_lock(&cl->mu);
	free(r->prompt);
	r->prompt = NULL;
	free(r->grammar);
	r->grammar = NULL;
	r->sp.grammar = NULL;
	r->sp.n_grammar = 0;
	r->state = SHOAL_SERVE_RUN_FREE;
	pthread_mutex_unlock(&cl->mu);
}

/* The end of run `run` (data thread): an API run's goes straight to its
 * sink and its slot is freed here; a control-plane run's goes through the
 * event ring to the node thread, which sends RUN_END and frees the slot. */
static void serve_end_run(shoal_serve *cl, uint32_t run, shoal_err err, bool retry, const char *why)
{
	shoal_serve_run *r = &cl->runs[run];
	r->ended = true;
	if (r->has_sink) {
		char tail[SHOAL_RUN_MAX_TEXT];
		size_t tl = shoal_detok_flush(&r->dt, tail, sizeof tail);
		r->sink.on_end(r->sink.ctx, err, why ? why : "", tail, tl);
		serve__free_run(cl, r);
		return;
	}
	shoal_serve_event ev;
	memset(&ev, 0, sizeof ev);
	ev.run = run;
	ev.kind = SHOAL_SERVE_EV_END;
	ev.err = err;
	ev.retry = retry;
	snprintf(ev.why, sizeof ev.why, "%s", why ? why : "");
	serve__event_push(cl, &ev);
}

static int serve_on_token(void *ctx, const shoal_dist_token *t)
{
	shoal_serve_tokctx *tc = ctx;
	shoal_serve *cl = tc->cl;
	shoal_serve_run *r = &cl->runs[tc->run];
	r->last_us = shoal_clock_now_us();
	if (t->step != r->n_gen ||
	    r->n_gen >= r->max_tokens) { /* cannot be: the owner's sequence */
		SHOAL_LOG_E("cluster", "run %u: token of step %u after %u tokens: ended", tc->run,
		            t->step, r->n_gen);
		return 1;
	}
	if (!r->n_gen && r->has_sink && r->sink.on_cached) /* the first start's reuse */
		r->sink.on_cached(r->sink.ctx, t->cached < r->n_prompt ? t->cached : r->n_prompt);
	r->prompt[r->n_prompt + r->n_gen++] = t->id; /* the history a replay feeds */
	if (r->paused_us) {
		SHOAL_LOG_I("cluster",
		            "run %u: token %u streams %llu ms after the pause (replay %u)", tc->run,
		            t->step, (unsigned long long)((r->last_us - r->paused_us) / 1000u),
		            r->replays);
		r->paused_us = 0;
	}
	uint32_t n_top = t->n_top < SHOAL_DIST_MAX_LOGPROBS ? t->n_top : SHOAL_DIST_MAX_LOGPROBS;
	if (r->has_sink) {
		/* an API run: straight to the thread that serves its client,
		 * which the sink wakes (one thread hop after this one) */
		char text[SHOAL_RUN_MAX_TEXT];
		size_t tl = shoal_detok_push(&r->dt, t->id, text, sizeof text);
		r->sink.on_token(r->sink.ctx, t->id, text, tl, t->logprob, n_top, t->top_ids,
		                 t->top_lps);
		return 0;
	}
	shoal_serve_event ev;
	ev.run = tc->run;
	ev.kind = SHOAL_SERVE_EV_TOKEN;
	ev.err = SHOAL_OK;
	ev.id = t->id;
	ev.lp = t->logprob;
	ev.n_top = n_top;
	memcpy(ev.top_ids, t->top_ids, n_top * sizeof *ev.top_ids);
	memcpy(ev.top_lps, t->top_lps, n_top * sizeof *ev.top_lps);
	ev.why[0] = '\0';
	serve__event_push(cl, &ev);
	return 0;
}

/* ------------------------------------------------- the data thread's runs */

/* Run i goes back to the queue with its history, to be replayed (after
 * `delay_us`) on the plan that is servable then; it waits at most
 * SHOAL_SERVE_WAIT_MS from its first pause. Data thread. */
void serve__pause(shoal_serve *cl, uint32_t i, uint64_t now, uint64_t delay_us, const char *why)
{
	shoal_serve_run *r = &cl->runs[i];
	bool first = !r->paused_us;
	pthread_mutex_lock(&cl->mu);
	r->state = SHOAL_SERVE_RUN_QUEUED;
	r->not_before_us = now + delay_us;
	if (first)
		r->queued_us = now; /* its ticket stays: it keeps its place */
	pthread_mutex_unlock(&cl->mu);
	if (first) {
		r->paused_us = now;
		r->noplan_us = 0;
		r->noplan_since = 0;
		SHOAL_LOG_I("cluster", "run %u paused after %u token(s): %s", i, r->n_gen, why);
	}
}

/* A queued run's place: paused runs first, then in arrival order. */
typedef struct run_place {
	uint32_t i;
	bool resumed;
	uint64_t ticket;
} run_place;

static int place_cmp(const void *a, const void *b)
{
	const run_place *x = a, *y = b;
	if (x->resumed != y->resumed)
		return x->resumed ? -1 : 1;
	return x->ticket < y->ticket ? -1 : x->ticket > y->ticket;
}

/* How long run r has waited with no servable plan (now included). */
static uint64_t noplan_wait(shoal_serve_run *r, bool servable, uint64_t now)
{
	if (!servable && !r->noplan_since)
		r->noplan_since = now;
	if (servable && r->noplan_since) {
		r->noplan_us += now - r->noplan_since;
		r->noplan_since = 0;
	}
	return r->noplan_us + (r->noplan_since ? now - r->noplan_since : 0);
}

/* Run i leaves the queue to be ended (the caller tells why). */
static void unqueue(shoal_serve *cl, shoal_serve_run *r)
{
	pthread_mutex_lock(&cl->mu);
	r->state = SHOAL_SERVE_RUN_STARTED;
	pthread_mutex_unlock(&cl->mu);
}

/* A queued run that cannot start now: end it when it waited too long
 * (infeasible, no servable plan for SHOAL_SERVE_WAIT_MS, no session for
 * SHOAL_SERVE_QUEUE_MS); true when it still waits. */
static bool still_waits(shoal_serve *cl, uint32_t i, bool servable, bool infeasible,
                        const char *plan_why, uint32_t ahead, uint32_t sessions, uint64_t now)
{
	shoal_serve_run *r = &cl->runs[i];
	uint64_t noplan = noplan_wait(r, servable, now);
	char why[SHOAL_WHY_WRAP_LEN];
	if (!servable && infeasible && !r->paused_us) {
		/* a new request: no point in waiting for memory to come */
		unqueue(cl, r);
		serve_end_run(cl, i, SHOAL_ERR_INFEASIBLE, false, plan_why);
		return false;
	}
	if (!servable && noplan > SHOAL_SERVE_WAIT_MS * 1000u) {
		snprintf(why, sizeof why, "%s: no servable plan for %u s: %s",
		         r->n_gen ? "paused by a plan change" : "waiting",
		         SHOAL_SERVE_WAIT_MS / 1000u,
		         plan_why[0] ? plan_why : "the data plane had not taken the plan");
		unqueue(cl, r);
		serve_end_run(cl, i, SHOAL_ERR_TIMEOUT, !r->n_gen, why);
		return false;
	}
	pthread_mutex_lock(&cl->mu);
	uint64_t since = r->queued_us;
	pthread_mutex_unlock(&cl->mu);
	if (servable && now - since > SHOAL_SERVE_QUEUE_MS * 1000u) {
		snprintf(why, sizeof why,
		         "waited %u s for a session: %u run(s) ahead of it here, %u session(s) a "
		         "stage",
		         SHOAL_SERVE_QUEUE_MS / 1000u, ahead, sessions);
		unqueue(cl, r);
		serve_end_run(cl, i, SHOAL_ERR_BUSY, !r->n_gen, why);
		return false;
	}
	return true;
}

void serve__start_runs(shoal_serve_dt *d, shoal_serve_tokctx *tcs)
{
	shoal_serve *cl = d->cl;
	run_place q[SHOAL_SERVE_MAX_RUNS];
	uint32_t n = 0;
	char plan_why[SHOAL_WHY_LEN];
	pthread_mutex_lock(&cl->mu);
	/* read under the lock that serve__queue stamps queued_us under: a
	 * run queued by another thread after a clock read outside it would be
	 * in the future, and now - queued_us wrapped: a new request that found
	 * the sessions taken was ended at once with "waited 120 s for a
	 * session" (a 429 through the API; tests/sh/admit_queue.sh) */
	uint64_t now = shoal_clock_now_us();
	bool servable = cl->shared_servable && d->as &&
	                !memcmp(cl->shared_digest, d->as->digest, SHOAL_DIGEST_BYTES) && d->owner;
	bool infeasible = cl->shared_infeasible;
	snprintf(plan_why, sizeof plan_why, "%s", cl->shared_why);
	for (uint32_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++)
		if (cl->runs[i].state == SHOAL_SERVE_RUN_QUEUED)
			q[n++] = (run_place){i, cl->runs[i].paused_us != 0, cl->runs[i].ticket};
	pthread_mutex_unlock(&cl->mu);
	qsort(q, n, sizeof *q, place_cmp);
	uint32_t sessions = d->as ? d->as->sessions : 0;
	uint32_t ahead = 0; /* runs before this one that wait: the rest wait too (FIFO) */
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = q[k].i;
		shoal_serve_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool cancel = r->cancel;
		bool go =
		    !cancel && !ahead && servable && now >= r->not_before_us && d->live < sessions;
		if (go || cancel)
			r->state = SHOAL_SERVE_RUN_STARTED;
		if (go && !r->busy_retry) { /* a run's wait counts once, to its first start */
			uint64_t w = now - r->queued_us;
			cl->wait_sum_us += w;
			cl->wait_n++;
			if (w > cl->wait_max_us)
				cl->wait_max_us = w;
		}
		pthread_mutex_unlock(&cl->mu);
		if (cancel) {
			serve_end_run(cl, i, SHOAL_ERR_CLOSED, false, "the client went away");
			continue;
		}
		if (!go) {
			if (still_waits(cl, i, servable, infeasible, plan_why, ahead, sessions,
			                now))
				ahead++;
			continue;
		}
		noplan_wait(r, true, now);
		r->ended = false;
		r->last_us = now;
		char why[SHOAL_WHY_LEN] = "";
		tcs[i] = (shoal_serve_tokctx){cl, i};
		shoal_dist_request req = {.prompt = r->prompt,
		                          .n_prompt = r->n_prompt + r->n_gen,
		                          .max_tokens = r->max_tokens - r->n_gen,
		                          .logprobs = r->logprobs,
		                          .no_logprob = r->no_logprob,
		                          .first_step = r->n_gen,
		                          .sampler = r->sp,
		                          .eog = cl->tok,
		                          .on_token = serve_on_token,
		                          .ctx = &tcs[i],
		                          .draft_max = cl->cfg.draft_max};
		/* a drafter per run, of its request's kind or --speculate's (the
		 * owner frees it); none if it cannot be made: the run goes on
		 * without */
		serve__drafter(cl, r->spec >= 0 ? (shoal_speculate_kind)r->spec : cl->cfg.speculate,
		               &req.drafter);
		if (r->paused_us && !r->busy_retry) {
			r->replays++;
			SHOAL_LOG_I("cluster",
			            "run %u: replaying %u prompt + %u generated token(s)", i,
			            r->n_prompt, r->n_gen);
		}
		r->busy_retry = false;
		shoal_err e = shoal_dist_owner_start(d->owner, &req, &r->sid, why, sizeof why);
		if (e == SHOAL_ERR_BUSY) {
			/* our own sessions are not all closed yet: try again soon,
			 * keeping its place */
			pthread_mutex_lock(&cl->mu);
			r->state = SHOAL_SERVE_RUN_QUEUED;
			r->not_before_us = now + SHOAL_SERVE_BUSY_RETRY_MS * 1000u;
			pthread_mutex_unlock(&cl->mu);
			r->busy_retry = true;
			ahead++;
		} else if (e != SHOAL_OK) {
			serve_end_run(cl, i, e, false, why[0] ? why : shoal_strerror(e));
		} else {
			d->live++;
		}
	}
}

void serve__check_runs(shoal_serve_dt *d)
{
	shoal_serve *cl = d->cl;
	uint64_t now = shoal_clock_now_us();
	for (uint32_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++) {
		shoal_serve_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool started = r->state == SHOAL_SERVE_RUN_STARTED;
		bool cancel = r->cancel, noplan = cl->shared_noplan;
		pthread_mutex_unlock(&cl->mu);
		if (!started || r->ended || !d->owner)
			continue;
		shoal_err res = SHOAL_OK;
		char why[SHOAL_WHY_LEN] = "";
		if (noplan && !cancel) {
			/* the plan is gone (too few peers left): wait for one, as a
			 * plan change would, and replay on it */
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			serve__pause(cl, i, now, 0, "no plan serves the model now");
		} else if (cancel) {
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			serve_end_run(cl, i, SHOAL_ERR_CLOSED, false, "the client went away");
		} else if (shoal_dist_owner_done(d->owner, r->sid, &res, why, sizeof why)) {
			d->live--;
			if (res == SHOAL_ERR_BUSY) {
				/* a stage had no free session (other owners hold them):
				 * wait in the queue, keeping its place (the stage
				 * keeps ours too, dist_admit.c), and try again */
				pthread_mutex_lock(&cl->mu);
				r->state = SHOAL_SERVE_RUN_QUEUED;
				r->not_before_us = now + SHOAL_SERVE_BUSY_RETRY_MS * 1000u;
				pthread_mutex_unlock(&cl->mu);
				r->busy_retry = true;
				continue;
			}
			if ((res == SHOAL_ERR_CLOSED || res == SHOAL_ERR_IO ||
			     res == SHOAL_ERR_NOTFOUND) &&
			    (!r->paused_us || now - r->paused_us < SHOAL_SERVE_QUEUE_MS * 1000u)) {
				/* our link to stage 0 broke: the peer died or restarts;
				 * replay on the plan that serves next (a new one once
				 * the death is known, or this one with a new link) */
				serve__pause(cl, i, now, 100000u, why);
				continue;
			}
			serve_end_run(cl, i, res, false, why);
		} else if (now - r->last_us > SHOAL_SERVE_SILENCE_MS * 1000u) {
			/* the slot is freed and CLOSE sent: nothing leaks */
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			snprintf(why, sizeof why,
			         "no token for %u s while the plan stayed servable",
			         SHOAL_SERVE_SILENCE_MS / 1000u);
			serve_end_run(cl, i, SHOAL_ERR_TIMEOUT, false, why);
		}
	}
}
