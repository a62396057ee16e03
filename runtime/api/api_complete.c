/*
 * runtime/api/api_complete.c: a completion request (api_impl.h), chat or
 * plain: parsed and checked (api_req.c), turned into token ids by
 * ops.prompt, then one run per choice (n) queued by ops.submit: each
 * choice is a session of its own, so the cluster batches them. Choice i
 * samples with seed s + i (s: the request's seed, or a fresh one shown in
 * X-Shoal-Seed), so choice 0 is the n = 1 reply of seed s and seed s + i
 * with n = 1 gives choice i again. The runs fill their set (api_run.c) on
 * the node's thread; the connection's thread turns them into one JSON
 * reply here, or a stream of server-sent events (api_stream.c).
 *
 * The HTTP status waits for a run's first token or an end, so a refusal
 * (queue full, no plan) is a real 429 or 503; a whole reply waits for
 * every choice, and any choice's failure is the request's, with its
 * status. A failing choice, a refused submit or a client that goes away
 * cancels the other choices' runs: no session outlives its request.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/clock.h"
#include "models/grammar.h"

/* A whole reply's wait looks at its client this often (ms): a reply
 * nobody waits for frees its sessions within this. */
#define API_WHOLE_POLL_MS 200

/* A seed for a request without one: random, below 2^53 so that a client
 * in JavaScript (numbers are doubles) can send it back exactly. */
static uint64_t fresh_seed(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) /* never blocks after boot */
		v = (uint64_t)shoal_clock_now_us() * 0x9e3779b97f4a7c15ull;
	return v & ((1ull << 53) - 1);
}

/* The first choice that failed (its run ended with an error that is not
 * our own cut at a stop string), or -1. Under the runs' mu. */
static int first_failed(const api__conn *k)
{
	for (uint32_t i = 0; i < k->q.n; i++) {
		const api__choice *c = &k->ch[i];
		if (c->run->done && c->run->err && !c->stopped)
			return (int)i;
	}
	return -1;
}

/* Wait until a choice produced a token, one failed, or all ended well
 * (under nothing); -1 when the reply may begin, API_STOPPING when the
 * daemon stops, else the choice that failed first (its run's err and why
 * say how). The other runs are cancelled when it does not begin. */
#define API_STOPPING (-2)
static int wait_first(shoal_api *a, api__conn *k)
{
	api__runs *s = k->runs;
	pthread_mutex_lock(&s->mu);
	int bad;
	for (;;) {
		bool some = false, all = true;
		for (uint32_t i = 0; i < k->q.n; i++) {
			some |= k->ch[i].run->n_tok > 0;
			all &= k->ch[i].run->done;
		}
		bad = first_failed(k);
		if (bad >= 0 || some || all)
			break;
		if (a->stopping) {
			bad = API_STOPPING;
			break;
		}
		api__runs_wait(s, API_KEEPALIVE_MS);
	}
	if (bad != -1)
		api__choices_cancel(k);
	pthread_mutex_unlock(&s->mu);
	return bad;
}

/* The tools offered: the model's syntax (its chat format st, or se when
 * that is not known), and a required call's grammar. MHD_YES/NO after a
 * reply sent, or -1 to go on. */
static int setup_tools(shoal_api *a, struct MHD_Connection *c, api__conn *k, shoal_chat_style st,
                       shoal_err se)
{
	if (se)
		return api__fail(a, c, api__status_of(se) == 500 ? 503 : api__status_of(se), NULL,
		                 NULL, "the model's chat format is not known yet: %s",
		                 shoal_strerror(se));
	if (!(k->syn = shoal_chat_tool_syntax(st)))
		return api__fail(a, c, 400, "tools", "tools_unsupported",
		                 "the model's chat template (%s) defines no tool calls: send no "
		                 "'tools', or tool_choice \"none\"",
		                 shoal_chat_style_name(st));
	/* the syntaxes of Llama 3.1, Mistral and DeepSeek are control tokens */
	k->q.g.special = k->syn != SHOAL_CHAT_TOOLS_HERMES;
	/* a call is required: the reply is constrained to one, in the model's
	 * syntax, by the grammar the last stage samples under (it replaces a
	 * response_format: the reply is a call); each choice's run gets its
	 * own copy, and its own matcher state */
	if (k->q.tool_choice == SHOAL_API_TOOL_REQUIRED ||
	    k->q.tool_choice == SHOAL_API_TOOL_NAMED) {
		shoal_grammar_prog gp = {0};
		char gw[SHOAL_WHY_LEN] = "";
		shoal_err ge = shoal_grammar_tools(
		    k->syn, k->q.tools,
		    k->q.tool_choice == SHOAL_API_TOOL_NAMED ? k->q.tool_name : NULL, &gp, gw,
		    sizeof gw);
		if (ge)
			return api__fail(a, c, ge == SHOAL_ERR_NOMEM ? 500 : 400, "tools", NULL,
			                 "tool_choice: the functions' parameters: %s", gw);
		free(k->q.g.grammar);
		k->q.g.grammar = gp.w;
		k->q.g.n_grammar = gp.n;
	}
	return -1;
}

/* How a chat reply's reasoning is told from its answer: the form of the
 * model's chat format st (models/reply.h). gpt-oss's channels are control
 * tokens, so its text keeps them. A format not known yet (se) reads as
 * PLAIN. */
static void setup_reply(api__conn *k, shoal_chat_style st, shoal_err se)
{
	if (!k->q.chat || se)
		return;
	k->form = shoal_reply_form_of(st);
	if (k->form == SHOAL_REPLY_HARMONY)
		k->q.g.special = true;
}

/* Queue a run per choice. MHD_YES/NO after an error reply (the runs
 * queued before it cancelled), or -1 when all are queued. */
static int submit_all(shoal_api *a, struct MHD_Connection *c, api__conn *k, const int32_t *ids,
                      size_t n_ids)
{
	uint64_t s0 = k->q.g.seed;
	for (uint32_t i = 0; i < k->q.n; i++) {
		api__choice *ch = &k->ch[i];
		char why[SHOAL_WHY_LEN] = "";
		shoal_api_gen g = k->q.g;
		g.seed = s0 + i; /* wraps past 2^64: still a seed */
		shoal_api_sink sink = api__runs_sink(k->runs, i);
		shoal_err e =
		    a->ops.submit(a->ops.ctx, ids, n_ids, &g, &sink, &ch->handle, why, sizeof why);
		if (e) {
			api__runs_unref(k->runs); /* this run never started */
			pthread_mutex_lock(&k->runs->mu);
			api__choices_cancel(k);
			pthread_mutex_unlock(&k->runs->mu);
			if (k->q.n == 1)
				return api__fail(a, c, api__status_of(e), NULL, NULL, "%s",
				                 why[0] ? why : shoal_strerror(e));
			return api__fail(a, c, api__status_of(e), "n", NULL,
			                 "choice %u of n = %u could not be queued: %s", i, k->q.n,
			                 why[0] ? why : shoal_strerror(e));
		}
		ch->submitted = true;
	}
	return -1;
}

/* A choice's failure as the request's error reply. */
static enum MHD_Result fail_choice(shoal_api *a, struct MHD_Connection *c, api__conn *k, int i,
                                   const char *prefix)
{
	api__run *r = k->ch[i].run;
	pthread_mutex_lock(&k->runs->mu);
	shoal_err e = r->err;
	char why[SHOAL_WHY_LEN];
	snprintf(why, sizeof why, "%s", r->why[0] ? r->why : shoal_strerror(e));
	pthread_mutex_unlock(&k->runs->mu);
	if (k->q.n == 1)
		return api__fail(a, c, api__status_of(e), NULL, NULL, "%s%s", prefix, why);
	return api__fail(a, c, api__status_of(e), NULL, NULL, "%schoice %d of %u: %s", prefix, i,
	                 k->q.n, why);
}

/* Wait for every choice's end and send the whole reply. */
static enum MHD_Result whole(shoal_api *a, struct MHD_Connection *c, api__conn *k)
{
	api__runs *s = k->runs;
	pthread_mutex_lock(&s->mu);
	bool gone = false, all = false;
	int bad = -1;
	while (!a->stopping && !gone) {
		all = true;
		for (uint32_t i = 0; i < k->q.n; i++) {
			api__choice *ch = &k->ch[i];
			bool hit;
			api__visible_end(k, ch, &hit);
			if (hit && !ch->finished) { /* cut at a stop string: end the run */
				ch->finished = true;
				ch->stopped = true;
				a->ops.cancel(a->ops.ctx, ch->handle);
			}
			all &= ch->run->done;
		}
		if (all || (bad = first_failed(k)) >= 0)
			break;
		api__runs_wait(s, API_WHOLE_POLL_MS);
		gone = api__client_gone(c);
	}
	if (gone) {
		/* a whole reply nobody waits for: api__conn_end cancels the
		 * runs and frees their sessions now, not at their ends */
		pthread_mutex_unlock(&s->mu);
		return MHD_NO;
	}
	if (!all && bad < 0) { /* the daemon stops */
		api__choices_cancel(k);
		pthread_mutex_unlock(&s->mu);
		return api__fail(a, c, 503, NULL, NULL, "the run was cut: the node is stopping");
	}
	if (bad >= 0) {
		api__choices_cancel(k);
		pthread_mutex_unlock(&s->mu);
		return fail_choice(a, c, k, bad, "the run was cut: ");
	}
	json_t *choices = json_array();
	char why[SHOAL_WHY_LEN] = "";
	int unmet = -1;
	for (uint32_t i = 0; i < k->q.n; i++) {
		k->ch[i].finished = true;
		json_array_append_new(choices, api__choice_json(k, &k->ch[i], i));
		if (unmet < 0 && !api__calls_ok(k, &k->ch[i], why, sizeof why))
			unmet = (int)i;
	}
	json_t *j = json_pack("{ss ss sI ss ss so so}", "id", k->id, "object",
	                      k->q.chat ? "chat.completion" : "text_completion", "created",
	                      (json_int_t)k->created, "model", k->model, "system_fingerprint",
	                      k->fingerprint, "choices", choices, "usage", api__usage_json(k));
	pthread_mutex_unlock(&s->mu);
	if (unmet >= 0) {
		json_decref(j);
		if (k->q.n == 1)
			return api__fail(a, c, 500, "tool_choice", "tool_call_missing", "%s", why);
		return api__fail(a, c, 500, "tool_choice", "tool_call_missing",
		                 "choice %d of %u: %s", unmet, k->q.n, why);
	}
	a->req_ok++;
	char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	enum MHD_Result res =
	    body ? api__reply(a, c, 200, "application/json", body, strlen(body), k->seed)
	         : api__send(a, c, 500, "text/plain", "out of memory\n", 14);
	free(body);
	return res;
}

enum MHD_Result api__complete(shoal_api *a, struct MHD_Connection *c, api__conn *k, bool chat)
{
	char bad[SHOAL_WHY_LEN] = "";
	const char *param = NULL;
	unsigned status;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	int res;
	char why[SHOAL_WHY_LEN] = "";
	api__model(a, k->model, sizeof k->model);
	if (shoal_api_req_parse(k->body, k->len, chat, k->model[0] ? k->model : NULL, &k->q,
	                        &status, &param, bad, sizeof bad)) {
		res = api__fail(a, c, status, param, status == 404 ? "model_not_found" : NULL, "%s",
		                bad);
		goto out;
	}
	if (!k->q.seeded)
		k->q.g.seed = fresh_seed();
	snprintf(k->seed, sizeof k->seed, "%" PRIu64, k->q.g.seed);
	snprintf(k->fingerprint, sizeof k->fingerprint, "shoal-seed-%" PRIu64, k->q.g.seed);
	bool offer = k->q.tools && k->q.tool_choice != SHOAL_API_TOOL_NONE;
	/* the model's chat format, asked once: tools and the reply's form */
	shoal_chat_style st = SHOAL_CHAT_PLAIN;
	shoal_err se = SHOAL_OK;
	if ((chat || offer) && a->ops.chat_style)
		se = a->ops.chat_style(a->ops.ctx, &st);
	if (offer && (res = setup_tools(a, c, k, st, se)) >= 0)
		goto out;
	setup_reply(k, st, se);
	shoal_err e =
	    a->ops.prompt(a->ops.ctx, chat ? k->q.msgs : NULL, k->q.n_msgs,
	                  offer ? k->q.tools : NULL, k->q.prompt, &ids, &n_ids, why, sizeof why);
	if (e) {
		res = api__fail(a, c, api__status_of(e) == 500 ? 400 : api__status_of(e),
		                chat ? "messages" : "prompt", NULL, "the prompt: %s",
		                why[0] ? why : shoal_strerror(e));
		goto out;
	}
	k->q.n_prompt = n_ids;
	k->ctx = a->ops.context ? a->ops.context(a->ops.ctx) : 0;
	snprintf(k->id, sizeof k->id, "%s-%016" PRIxFAST64, chat ? "chatcmpl" : "cmpl",
	         (uint_fast64_t)++a->seq);
	k->created = (long long)time(NULL);
	k->conn = c;
	k->ch = calloc(k->q.n, sizeof *k->ch);
	k->runs = k->ch
	              ? api__runs_new(k->q.n, !k->q.stream && !k->q.n_stop, api__test_reply(&k->q))
	              : NULL;
	if (!k->runs) {
		res = api__fail(a, c, 500, NULL, NULL, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < k->q.n; i++) {
		k->ch[i].run = &k->runs->run[i];
		/* call ids unique over the choices; choice 0's as with n = 1 */
		if (i)
			snprintf(k->ch[i].base, sizeof k->ch[i].base, "%s_%u", k->id + 9, i);
		else
			snprintf(k->ch[i].base, sizeof k->ch[i].base, "%s", k->id + 9);
	}
	if ((res = submit_all(a, c, k, ids, n_ids)) >= 0)
		goto out;
	int bad_i = wait_first(a, k);
	if (bad_i == API_STOPPING) {
		res = api__fail(a, c, 503, NULL, NULL, "the node is stopping");
		goto out;
	}
	if (bad_i >= 0) {
		res = fail_choice(a, c, k, bad_i, "");
		goto out;
	}
	if (!k->q.stream) {
		res = whole(a, c, k);
		goto out;
	}
	struct MHD_Response *r = api__stream_response(k);
	if (!r) {
		res = MHD_NO;
		goto out;
	}
	a->streams++; /* until api__conn_end */
	k->counted = true;
	api__headers(a, r);
	MHD_add_response_header(r, "X-Shoal-Seed", k->seed);
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	res = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
out:
	free(ids);
	return (enum MHD_Result)res;
}

void api__conn_end(shoal_api *a, api__conn *k, enum MHD_RequestTerminationCode toe)
{
	if (k->counted)
		a->streams--;
	if (k->runs) {
		pthread_mutex_lock(&k->runs->mu);
		bool going = false, submitted = false;
		for (uint32_t i = 0; i < k->q.n; i++) {
			const api__choice *ch = &k->ch[i];
			a->tokens += ch->run->n_tok;
			going |= ch->submitted && !ch->run->done && !ch->finished;
			submitted |= ch->submitted;
		}
		if (going) {
			/* the client went away mid-run: the sessions are freed now */
			api__choices_cancel(k);
			a->req_cancelled++;
		} else if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && submitted &&
		           !k->end_sent && k->q.stream) {
			a->req_cancelled++;
		}
		pthread_mutex_unlock(&k->runs->mu);
		api__runs_unref(k->runs);
		k->runs = NULL;
	}
	for (uint32_t i = 0; k->ch && i < k->q.n; i++) {
		if (k->ch[i].parsed)
			shoal_tool_parsed_fini(&k->ch[i].tp);
		shoal_reply_fini(&k->ch[i].rp);
	}
	free(k->ch);
	k->ch = NULL;
	shoal_api_req_fini(&k->q);
}
