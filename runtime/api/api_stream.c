/*
 * runtime/api/api_stream.c: a completion streamed as server-sent events
 * (api_impl.h). libmicrohttpd pulls the body from stream_read on the
 * connection's thread; each pull waits for any of the request's runs to
 * move, then steps every choice that has not ended, in index order, and
 * queues its events: a chat choice's role first, its text as it becomes
 * visible (stop strings and what may be a function call held back), its
 * calls (id and name, then the arguments in pieces) and its own
 * finish_reason chunk once its run ended. Choices interleave as their
 * tokens come; each chunk carries its choice's index. When all ended: the
 * usage chunk (stream_options.include_usage) and one [DONE]. A choice that
 * fails (the cluster cut its run, a required call missing) ends the whole
 * stream with an error event and [DONE], and the other choices' runs are
 * cancelled, their sessions freed.
 *
 * Part: runtime/, room api/.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events libmicrohttpd takes per pull: a buffer of this many bytes (a
 * token's chunk is ~200 bytes; logprobs with 20 alternatives ~4 KiB). */
#define API_STREAM_BLOCK 16384

static bool out_add(api__conn *k, const char *s, size_t n)
{
	if (k->out_len + n > k->out_cap) {
		size_t cap = (k->out_cap ? k->out_cap * 2 : 4096) + n;
		char *o = realloc(k->out, cap);
		if (!o)
			return false;
		k->out = o;
		k->out_cap = cap;
	}
	memcpy(k->out + k->out_len, s, n);
	k->out_len += n;
	return true;
}

/* "data: JSON\n\n" (the reference to j is taken) */
static void out_event(api__conn *k, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return;
	out_add(k, "data: ", 6);
	out_add(k, s, strlen(s));
	out_add(k, "\n\n", 2);
	free(s);
}

static void out_done(api__conn *k)
{
	out_add(k, "data: [DONE]\n\n", 14);
	k->end_sent = true;
}

/* A chunk of the reply, choices[] holding `choice` (the reference is taken). */
static json_t *chunk(const api__conn *k, json_t *choice)
{
	return json_pack("{ss ss sI ss ss s[o]}", "id", k->id, "object",
	                 k->q.chat ? "chat.completion.chunk" : "text_completion", "created",
	                 (json_int_t)k->created, "model", k->model, "system_fingerprint",
	                 k->fingerprint, "choices", choice);
}

/* The events of choice i since its last step. True while it goes or when
 * it ended well (its finish chunk queued, c->end_sent); false when it
 * failed: why, *param and *code say how. */
static bool step_choice(api__conn *k, uint32_t i, char *why, size_t why_len, const char **param,
                        const char **code)
{
	api__choice *c = &k->ch[i];
	api__run *r = c->run;
	bool hit;
	size_t end = api__visible_end(k, c, &hit);
	size_t seen = end;
	if (hit && !c->stopped) {
		c->stopped = true;
		if (!c->finished) { /* the text is cut: the rest is not wanted */
			c->finished = true;
			k->a->ops.cancel(k->a->ops.ctx, c->handle);
		}
	}
	bool final = r->done || c->stopped;
	bool failed = r->done && r->err && !c->stopped; /* cut by the cluster */
	c->seen_tok = r->n_tok;
	c->seen_text = r->len;
	/* the answer (and the reasoning apart): what content, calls and
	 * deltas see; its bytes only grow (models/reply.h) */
	if (k->q.chat && !api__reply_read(k, c, end, final && !failed)) {
		snprintf(why, why_len, "out of memory");
		*param = *code = NULL;
		return false;
	}
	size_t raw = k->q.chat && k->form != SHOAL_REPLY_PLAIN ? c->rp.settled : 0;
	const char *text = r->text ? r->text : "";
	if (k->q.chat) {
		text = c->rp.content;
		end = c->rp.n_content;
	}
	if (k->syn && !final) { /* what may be a call waits for the end */
		size_t h = shoal_tool_hold(k->syn, text, end);
		end = h < end ? h : end;
		while (end > c->sent_text && (text[end - 1] == ' ' || text[end - 1] == '\n' ||
		                              text[end - 1] == '\t' || text[end - 1] == '\r'))
			end--; /* white space before a call is not content */
	} else if (k->syn && !failed) {
		end = api__parse_calls(k, c);
	}
	if (end < c->sent_text)
		end = c->sent_text;
	/* the tokens the deltas cover: up to the answer's end in the text,
	 * or, when the reply has a reasoning form, up to what it settled */
	size_t nt = api__toks_before(r, raw ? raw : end);
	if (k->q.chat && !c->role_sent) {
		out_event(k,
		          chunk(k, json_pack("{sI s{ss ss} so so}", "index", (json_int_t)i, "delta",
		                             "role", "assistant", "content", "", "logprobs",
		                             json_null(), "finish_reason", json_null())));
		c->role_sent = true;
	}
	if (k->q.chat && c->rp.n_reasoning > c->sent_reason) {
		/* the reasoning's tokens' logprobs come with the answer's
		 * first delta */
		out_event(k,
		          chunk(k, json_pack("{sI s{ss%} so so}", "index", (json_int_t)i, "delta",
		                             "reasoning_content", c->rp.reasoning + c->sent_reason,
		                             c->rp.n_reasoning - c->sent_reason, "logprobs",
		                             json_null(), "finish_reason", json_null())));
		c->sent_reason = c->rp.n_reasoning;
	}
	if (end > c->sent_text) {
		const char *t = text + c->sent_text;
		size_t n = end - c->sent_text;
		json_t *lp = k->q.logprobs && nt > c->sent_tok
		                 ? api__logprobs(k, c, c->sent_tok, nt)
		                 : json_null();
		json_t *choice =
		    k->q.chat
		        ? json_pack("{sI s{ss%} so so}", "index", (json_int_t)i, "delta", "content",
		                    t, n, "logprobs", lp, "finish_reason", json_null())
		        : json_pack("{ss% sI so so}", "text", t, n, "index", (json_int_t)i,
		                    "logprobs", lp, "finish_reason", json_null());
		out_event(k, chunk(k, choice));
		c->sent_text = end;
		if (nt > c->sent_tok)
			c->sent_tok = nt;
	}
	if (!final)
		return true;
	if (failed) {
		snprintf(why, why_len, "%s", r->why[0] ? r->why : "the run failed");
		*param = *code = NULL;
		return false;
	}
	if (!api__calls_ok(k, c, why, why_len)) {
		*param = "tool_choice";
		*code = "tool_call_missing";
		return false;
	}
	json_t *ds = c->n_calls ? api__tool_deltas(&c->tp, c->n_calls, c->base) : NULL;
	for (size_t j = 0; j < json_array_size(ds); j++)
		out_event(k, chunk(k, json_pack("{sI sO so so}", "index", (json_int_t)i, "delta",
		                                json_array_get(ds, j), "logprobs", json_null(),
		                                "finish_reason", json_null())));
	json_decref(ds);
	json_t *choice =
	    k->q.chat ? json_pack("{sI s{} so ss}", "index", (json_int_t)i, "delta", "logprobs",
	                          json_null(), "finish_reason", api__finish_reason(k, c))
	              : json_pack("{ss sI so ss}", "text", "", "index", (json_int_t)i, "logprobs",
	                          json_null(), "finish_reason", api__finish_reason(k, c));
	out_event(k, chunk(k, choice));
	c->n_out = api__toks_before(r, seen); /* the call's tokens count too */
	c->end_sent = true;
	return true;
}

/* Queue the events for what the runs produced since the last call (under
 * the runs' mu); at the end the closing events. */
static void stream_step(api__conn *k)
{
	bool all = true;
	for (uint32_t i = 0; i < k->q.n; i++) {
		if (k->ch[i].end_sent)
			continue;
		char why[SHOAL_WHY_LEN] = "";
		const char *param, *code;
		if (!step_choice(k, i, why, sizeof why, &param, &code)) {
			/* one choice failed: say so, never a silent close, and
			 * free the others' sessions now */
			char msg[SHOAL_WHY_WRAP_LEN];
			if (k->q.n > 1)
				snprintf(msg, sizeof msg, "choice %u of %u: %s", i, k->q.n, why);
			else
				snprintf(msg, sizeof msg, "%s", why);
			out_event(k, api__error_json("server_error", msg, param, code));
			k->a->req_server_err++;
			api__choices_cancel(k);
			out_done(k);
			return;
		}
		all &= k->ch[i].end_sent;
	}
	if (!all)
		return;
	if (k->q.usage)
		out_event(k, json_pack("{ss ss sI ss s[] so}", "id", k->id, "object",
		                       k->q.chat ? "chat.completion.chunk" : "text_completion",
		                       "created", (json_int_t)k->created, "model", k->model,
		                       "choices", "usage", api__usage_json(k)));
	k->a->req_ok++;
	out_done(k);
}

/* Whether a choice still going has news since its last step. */
static bool stream_news(const api__conn *k)
{
	for (uint32_t i = 0; i < k->q.n; i++) {
		const api__choice *c = &k->ch[i];
		const api__run *r = c->run;
		if (!c->end_sent &&
		    (r->done || r->n_tok != c->seen_tok || r->len != c->seen_text || c->stopped))
			return true;
	}
	return false;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	api__conn *k = cls;
	api__runs *s = k->runs;
	while (k->out_off == k->out_len) {
		if (k->end_sent)
			return MHD_CONTENT_READER_END_OF_STREAM;
		k->out_len = k->out_off = 0;
		pthread_mutex_lock(&s->mu);
		if (k->a->stopping) {
			/* the node that owns the runs stops: say so, never a
			 * silent close (shoal_api_stop waits for this) */
			out_event(k, api__error_json("server_error",
			                             "the peer serving this request is stopping",
			                             NULL, NULL));
			k->a->req_server_err++;
			api__choices_cancel(k);
			out_done(k);
			pthread_mutex_unlock(&s->mu);
			continue;
		}
		if (!stream_news(k))
			api__runs_wait(s, API_KEEPALIVE_MS);
		if (api__client_gone(k->conn)) {
			/* the client's end is looked at (a poll), not only
			 * found by a failed write: choices that wait for a
			 * session send nothing for long, and a write into a
			 * closed socket fails only the second time;
			 * api__conn_end cancels the runs */
			pthread_mutex_unlock(&s->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		size_t before = k->out_len;
		stream_step(k);
		if (k->out_len == before && !k->end_sent)
			out_add(k, ": keepalive\n\n", 13);
		pthread_mutex_unlock(&s->mu);
	}
	size_t n = k->out_len - k->out_off < max ? k->out_len - k->out_off : max;
	memcpy(buf, k->out + k->out_off, n);
	k->out_off += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	(void)cls; /* the connection's state goes in api__conn_end */
}

struct MHD_Response *api__stream_response(api__conn *k)
{
	return MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, API_STREAM_BLOCK, stream_read, k,
	                                         stream_free);
}
