/*
 * runtime/node/serve_clients.c: the clients of runs: RUN_REQ messages from
 * control-plane clients (`shoal run --peer`) and their RUN_TOKEN / RUN_END
 * replies, sent by the node thread from the data thread's events; and the
 * HTTP API's ops table (runtime/api/api.h), whose runs' tokens the data
 * thread hands straight to the API's sink (serve_runs.c).
 *
 * Divisions: control-plane requests and replies; the HTTP API.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/log.h"
#include "net/ctlmsg.h"
#include "models/prompt.h"

/* ------------------------------------- control-plane requests and replies */

/* cl->msg (encoded by the caller) to the client. */
static void serve_send(shoal_serve *cl, const shoal_ctl_route *to)
{
	if (cl->cfg.reply)
		cl->cfg.reply(cl->cfg.ud, to, cl->msg.data, cl->msg.len);
}

/* The end of run seq: err SHOAL_OK with the detokenizer's tail, or an error
 * with its reason (retry: the same request may succeed if sent again). */
static void serve_end_n(shoal_serve *cl, const shoal_ctl_route *to, uint64_t seq, shoal_err err,
                        bool retry, const char *why, const char *tail, size_t tail_len,
                        uint32_t tokens)
{
	shoal_run_end end = {.err = err, .retry = err && retry, .tokens = tokens};
	if (err) {
		end.why = why && why[0] ? why : shoal_strerror(err);
		end.why_len = strnlen(end.why, SHOAL_RUN_MAX_WHY);
		end.text = "";
	} else {
		end.text = tail ? tail : "";
		end.text_len =
		    tail ? (tail_len < SHOAL_RUN_MAX_TEXT ? tail_len : SHOAL_RUN_MAX_TEXT) : 0;
	}
	if (shoal_runmsg_encode_end(seq, &end, &cl->msg) == SHOAL_OK)
		serve_send(cl, to);
	else
		SHOAL_LOG_W("cluster", "cannot encode the end of run %llu",
		            (unsigned long long)seq);
}

/* The end of a run that sent no tokens (refused before it started). */
static void serve_end(shoal_serve *cl, const shoal_ctl_route *to, uint64_t seq, shoal_err err,
                      bool retry, const char *why, const char *tail, size_t tail_len)
{
	serve_end_n(cl, to, seq, err, retry, why, tail, tail_len, 0);
}

void shoal_serve_run_request(shoal_serve *cl, const shoal_ctl_route *from, const uint8_t *buf,
                             size_t len)
{
	char why[SHOAL_WHY_LEN] = "";
	int32_t *ids = NULL;
	size_t n_ids = 0;
	char *prompt = NULL, *system = NULL;
	shoal_runmsg rm;
	shoal_err e = shoal_runmsg_decode(buf, len, &rm, why, sizeof why);
	if (e == SHOAL_OK && rm.type != SHOAL_CTLMSG_RUN_REQ)
		e = shoal_why(why, sizeof why, SHOAL_ERR_PROTO, "a run reply sent to a peer");
	uint64_t seq = rm.seq;
	if (e) {
		char w[SHOAL_WHY_WRAP_LEN];
		snprintf(w, sizeof w, "bad request: %s", why);
		serve_end(cl, from, seq, e, false, w, NULL, 0);
		return;
	}
	const shoal_run_req *q = &rm.req;
	prompt = strndup(q->prompt, q->prompt_len);
	system = q->system ? strndup(q->system, q->system_len) : NULL;
	if (!prompt || (q->system && !system)) {
		serve_end(cl, from, seq, SHOAL_ERR_NOMEM, false, "out of memory", NULL, 0);
		goto out;
	}
	shoal_sampler_params sp = shoal_sampler_defaults();
	uint32_t n = q->max_tokens, k = q->logprobs;
	sp.temp = q->temp;
	sp.top_k = (int32_t)q->top_k;
	sp.top_p = q->top_p;
	sp.min_p = q->min_p;
	sp.repeat_penalty = q->repeat_penalty;
	sp.seed = q->seed;
	/* the decoder checked the limits; the sampler's own ranges here */
	if (sp.top_k < 0 || !(sp.top_p >= 0 && sp.top_p <= 1) ||
	    !(sp.min_p >= 0 && sp.min_p <= 1)) {
		serve_end(cl, from, seq, SHOAL_ERR_RANGE, false,
		          "bad request: a sampler parameter is out of range", NULL, 0);
		goto out;
	}
	/* speculate: a kind this node offers (as the API's field), or its own */
	int spec = -1;
	if (q->speculate) {
		char name[SHOAL_RUN_MAX_SPECULATE + 1];
		shoal_speculate_kind kind;
		memcpy(name, q->speculate, q->speculate_len); /* the decoder checked its length */
		name[q->speculate_len] = '\0';
		e = shoal_speculate_parse(name, &kind, why, sizeof why);
		if (!e)
			e = serve__spec_check(cl, kind, why, sizeof why);
		if (e) {
			char w[SHOAL_WHY_WRAP_LEN];
			snprintf(w, sizeof w, "bad request: speculate: %s", why);
			serve_end(cl, from, seq, e, false, w, NULL, 0);
			goto out;
		}
		spec = (int)kind;
	}
	bool chat = q->chat;
	why[0] = '\0';
	e = shoal_prompt_ids(cl->model, cl->tok, prompt, chat, system, &ids, &n_ids, why,
	                     sizeof why);
	if (e != SHOAL_OK) {
		char w[SHOAL_WHY_WRAP_LEN];
		snprintf(w, sizeof w, "the prompt: %s", why[0] ? why : shoal_strerror(e));
		serve_end(cl, from, seq, e, false, w, NULL, 0);
		goto out;
	}
	if (n_ids == 0) {
		serve_end(cl, from, seq, SHOAL_ERR_INVAL, false, "the prompt has no tokens", NULL,
		          0);
		goto out;
	}
	if (n_ids >= cl->pol.ctx) {
		snprintf(why, sizeof why, "the prompt has %zu tokens, the context %u", n_ids,
		         cl->pol.ctx);
		serve_end(cl, from, seq, SHOAL_ERR_RANGE, false, why, NULL, 0);
		goto out;
	}
	if (n == 0) {
		serve_end(cl, from, seq, SHOAL_OK, false, NULL, "", 0);
		goto out;
	}
	uint32_t slot;
	/* without --logprobs the client shows no logprob: the last stage
	 * skips the log-sum-exp over the vocabulary (~15 % of a small
	 * model's token) */
	e = serve__queue(cl, &ids, n_ids, (uint32_t)n, (uint32_t)k, k == 0, false, spec, &sp, from,
	                 seq, NULL, &slot, why, sizeof why);
	if (e)
		serve_end(cl, from, seq, e, e == SHOAL_ERR_BUSY, why, NULL, 0);
out:
	free(ids);
	free(prompt);
	free(system);
}

void shoal_serve_client_gone(shoal_serve *cl, int fd)
{
	uint32_t n = 0;
	if (fd < 0)
		return;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++)
		if (cl->runs[i].state != SHOAL_SERVE_RUN_FREE && cl->runs[i].route.fd == fd &&
		    !cl->runs[i].cancel) {
			cl->runs[i].cancel = true;
			n++;
		}
	pthread_mutex_unlock(&cl->mu);
	if (n) {
		SHOAL_LOG_I("cluster", "a client went away: %u run(s) end", n);
		serve__wake(cl);
	}
}

int shoal_serve_event_fd(const shoal_serve *cl)
{
	return cl->evfd[0];
}

void shoal_serve_drain(shoal_serve *cl)
{
	char drain[64];
	while (read(cl->evfd[0], drain, sizeof drain) > 0)
		;
	char text[SHOAL_RUN_MAX_TEXT];
	shoal_run_token tok;
	for (;;) {
		shoal_serve_event ev;
		pthread_mutex_lock(&cl->mu);
		if (!cl->ev_n) {
			pthread_mutex_unlock(&cl->mu);
			break;
		}
		ev = cl->ev[cl->ev_head];
		cl->ev_head = (cl->ev_head + 1) % SHOAL_SERVE_EVENTS;
		cl->ev_n--;
		pthread_cond_broadcast(&cl->cv);
		if (ev.kind == SHOAL_SERVE_EV_PEER_GONE) {
			pthread_mutex_unlock(&cl->mu);
			if (cl->cfg.peer_gone)
				cl->cfg.peer_gone(cl->cfg.ud, ev.peer, ev.inc, ev.why);
			continue;
		}
		shoal_serve_run *r = &cl->runs[ev.run];
		shoal_ctl_route to = r->route;
		uint64_t seq = r->seq;
		pthread_mutex_unlock(&cl->mu);
		if (ev.kind == SHOAL_SERVE_EV_TOKEN) {
			/* into preallocated buffers: nothing allocated per token */
			tok.id = ev.id;
			tok.logprob = ev.lp;
			tok.text = text;
			tok.text_len = shoal_detok_push(&r->dt, ev.id, text, sizeof text);
			tok.n_top = ev.n_top;
			memcpy(tok.top_ids, ev.top_ids, ev.n_top * sizeof *tok.top_ids);
			memcpy(tok.top_lps, ev.top_lps, ev.n_top * sizeof *tok.top_lps);
			if (shoal_runmsg_encode_token(seq, &tok, &cl->msg) == SHOAL_OK)
				serve_send(cl, &to);
			r->n_sent++;
		} else {
			size_t tl = shoal_detok_flush(&r->dt, text, sizeof text);
			serve_end_n(cl, &to, seq, ev.err, ev.retry, ev.why, text, tl, r->n_sent);
			serve__free_run(cl, r);
		}
	}
}

/* ------------------------------------------------------------ the HTTP API */

/* The serving state the API reaches; NULL while a peer without the file has
 * no weights yet (its requests get 503 with the reason). */
static shoal_serve *api_serve(void *ctx, char *why, size_t why_len)
{
	shoal_serve_api *a = ctx;
	shoal_serve *cl = __atomic_load_n(&a->serve, __ATOMIC_ACQUIRE);
	if (!cl && why)
		shoal_why(why, why_len, SHOAL_ERR_STATE,
		          "this peer has no model yet: it is fetching its part of the weights "
		          "(see /v1/cluster); another peer may serve the request now");
	return cl;
}

static shoal_err api_prompt(void *ctx, const shoal_chat_msg *msgs, size_t n, const char *tools,
                            const char *text, int32_t **ids, size_t *n_ids, char *why,
                            size_t why_len)
{
	shoal_serve *cl = api_serve(ctx, why, why_len);
	if (!cl)
		return SHOAL_ERR_STATE;
	shoal_err e = msgs ? shoal_prompt_chat_tools_ids(cl->model, cl->tok, msgs, n, tools, ids,
	                                                 n_ids, why, why_len)
	                   : shoal_prompt_ids(cl->model, cl->tok, text ? text : "", false, NULL,
	                                      ids, n_ids, why, why_len);
	if (e)
		return e;
	if (!*n_ids || *n_ids >= cl->pol.ctx) {
		e = shoal_why(why, why_len, SHOAL_ERR_RANGE, "%zu tokens; the context holds %u",
		              *n_ids, cl->pol.ctx);
		free(*ids);
		*ids = NULL;
	}
	return e;
}

static shoal_err api_submit(void *ctx, const int32_t *ids, size_t n_ids, const shoal_api_gen *g,
                            const shoal_api_sink *sink, uint32_t *handle, char *why, size_t why_len)
{
	shoal_serve *cl = api_serve(ctx, why, why_len);
	if (!cl)
		return SHOAL_ERR_STATE;
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = g->temp;
	sp.top_p = g->top_p;
	sp.seed = g->seed;
	_Static_assert(SHOAL_API_MAX_BIAS == SHOAL_SAMPLER_MAX_BIAS, "logit_bias limits");
	sp.presence_penalty = g->presence;
	sp.frequency_penalty = g->frequency;
	sp.n_bias = g->n_bias < SHOAL_SAMPLER_MAX_BIAS ? g->n_bias : SHOAL_SAMPLER_MAX_BIAS;
	memcpy(sp.bias_id, g->bias_id, sp.n_bias * sizeof *sp.bias_id);
	memcpy(sp.bias, g->bias, sp.n_bias * sizeof *sp.bias);
	sp.grammar = g->grammar; /* serve__queue copies it */
	sp.n_grammar = g->n_grammar;
	if (!n_ids || n_ids >= cl->pol.ctx)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "%zu prompt tokens; the context holds %u", n_ids, cl->pol.ctx);
	/* "speculate": a kind this node offers, or its own */
	_Static_assert(SHOAL_API_SPEC_MTP - SHOAL_API_SPEC_OFF == SHOAL_SPECULATE_MTP &&
	                   SHOAL_API_SPEC_DRAFT - SHOAL_API_SPEC_OFF == SHOAL_SPECULATE_DRAFT,
	               "the API's speculate values follow shoal_speculate_kind");
	int spec = g->speculate == SHOAL_API_SPEC_NODE ? -1 : g->speculate - SHOAL_API_SPEC_OFF;
	shoal_err e;
	if (spec >= 0 &&
	    (e = serve__spec_check(cl, (shoal_speculate_kind)spec, why, why_len)) != SHOAL_OK)
		return e;
	int32_t *copy = malloc(n_ids * sizeof *copy);
	if (!copy)
		return SHOAL_ERR_NOMEM;
	memcpy(copy, ids, n_ids * sizeof *copy);
	e = serve__queue(cl, &copy, n_ids, g->max_tokens ? g->max_tokens : 1, g->logprobs,
	                 !g->logprob, g->special, spec, &sp, NULL, 0, sink, handle, why, why_len);
	free(copy);
	return e;
}

static void api_cancel(void *ctx, uint32_t handle)
{
	shoal_serve *cl = api_serve(ctx, NULL, 0);
	if (!cl)
		return;
	uint32_t slot = serve__handle_slot(handle);
	SHOAL_ASSERT(slot < SHOAL_SERVE_MAX_RUNS); /* a handle submit gave */
	pthread_mutex_lock(&cl->mu);
	shoal_serve_run *r = &cl->runs[slot];
	bool hit =
	    r->state != SHOAL_SERVE_RUN_FREE && r->has_sink && r->gen == serve__handle_gen(handle);
	if (hit)
		r->cancel = true;
	pthread_mutex_unlock(&cl->mu);
	if (hit)
		serve__wake(cl);
}

static size_t api_token_text(void *ctx, int32_t id, char *buf, size_t cap)
{
	shoal_serve *cl = api_serve(ctx, NULL, 0);
	if (!cl)
		return 0;
	size_t n = shoal_tokenizer_piece(cl->tok, id, false, buf, cap);
	return n < cap ? n : cap;
}

static char *api_status(void *ctx)
{
	shoal_serve_api *a = ctx;
	return a->status ? a->status(a->status_ctx) : NULL;
}

static void api_gauges(void *ctx, shoal_api_gauges *g)
{
	memset(g, 0, sizeof *g);
	shoal_serve *cl = api_serve(ctx, NULL, 0);
	if (!cl)
		return;
	uint64_t now = shoal_clock_now_us();
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++) {
		const shoal_serve_run *r = &cl->runs[i];
		g->running += r->state == SHOAL_SERVE_RUN_STARTED;
		if (r->state != SHOAL_SERVE_RUN_QUEUED)
			continue;
		g->queued++;
		g->queued_paused += r->paused_us != 0;
		if (now - r->queued_us > g->queue_oldest_us)
			g->queue_oldest_us = now - r->queued_us;
	}
	g->wait_sum_us = cl->wait_sum_us;
	g->wait_n = cl->wait_n;
	g->wait_max_us = cl->wait_max_us;
	g->stage_runs = cl->met_stage.runs;
	g->stage_batched_runs = cl->met_stage.batched_runs;
	g->stage_rows = cl->met_stage.rows;
	g->hidden_frames = cl->met_stage.hidden_sent;
	g->hidden_bytes = cl->met_stage.hidden_bytes;
	g->token_frames = cl->met_stage.tokens_sent;
	g->stage_last_run_ns = cl->met_stage.last_run_ns;
	g->prefix_hits = cl->met_stage.prefix_hits;
	g->prefix_hit_tokens = cl->met_stage.prefix_hit_tokens;
	g->prefix_evictions = cl->met_stage.prefix_evictions;
	g->prefix_entries = cl->met_stage.prefix_entries;
	g->prefix_tokens = cl->met_stage.prefix_tokens;
	g->prefix_bytes = cl->met_stage.prefix_bytes;
	g->spec_drafted = cl->met_owner.drafted;
	g->spec_accepted = cl->met_owner.accepted;
	g->pred_step_ns = cl->tm_pred_ns;
	g->stage_pred_ns = cl->tm_stage_pred_ns;
	g->step_ns = shoal_timing_median(&cl->tm_owner);
	g->stage_run_ns = shoal_timing_median(&cl->tm_run);
	pthread_mutex_unlock(&cl->mu);
}

static uint32_t api_context(void *ctx)
{
	shoal_serve *cl = api_serve(ctx, NULL, 0);
	return cl ? cl->pol.ctx : 0;
}

static shoal_err api_chat_style(void *ctx, shoal_chat_style *out)
{
	shoal_serve *cl = api_serve(ctx, NULL, 0);
	if (!cl)
		return SHOAL_ERR_STATE;
	return shoal_prompt_chat_style(cl->model, out, NULL, 0);
}

void shoal_serve_api_ops(shoal_serve_api *a, shoal_api_ops *ops)
{
	*ops = (shoal_api_ops){.prompt = api_prompt,
	                       .submit = api_submit,
	                       .cancel = api_cancel,
	                       .token_text = api_token_text,
	                       .cluster_json = api_status,
	                       .gauges = api_gauges,
	                       .context = api_context,
	                       .chat_style = api_chat_style,
	                       .ctx = a};
}

void shoal_serve_api_set(shoal_serve_api *a, shoal_serve *cl)
{
	__atomic_store_n(&a->serve, cl, __ATOMIC_RELEASE);
}
