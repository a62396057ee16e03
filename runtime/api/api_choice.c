/*
 * runtime/api/api_choice.c: one choice of a completion (api_impl.h), read
 * from its run: the text its client may see (cut at a stop string, a tail
 * that may become one held back), the function calls in it, its finish
 * reason, its logprobs in OpenAI's two shapes (chat and completions), the
 * whole reply's choice object, and the usage of all the choices.
 *
 * Part: runtime/, room api/. Everything here runs on the connection's
 * thread under the lock of the request's runs (api_run.c).
 *
 * Divisions: text and calls; logprobs; the whole reply's parts.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- text and calls */

size_t api__visible_end(const api__conn *k, const api__choice *c, bool *hit)
{
	const api__run *r = c->run;
	const char *text = r->text ? r->text : "";
	*hit = false;
	size_t end = r->len;
	for (size_t i = 0; i < k->q.n_stop; i++) {
		const char *p = strstr(text, k->q.stop[i]);
		if (p && (size_t)(p - text) < end) {
			end = (size_t)(p - text);
			*hit = true;
		}
	}
	if (*hit || r->done || !k->q.n_stop)
		return end;
	/* hold back the longest tail that is a prefix of a stop string */
	for (size_t l = k->q.max_stop - 1; l > 0; l--) {
		if (l > end)
			continue;
		for (size_t i = 0; i < k->q.n_stop; i++)
			if (strlen(k->q.stop[i]) > l && !memcmp(text + end - l, k->q.stop[i], l))
				return end - l;
	}
	return end;
}

size_t api__toks_before(const api__run *r, size_t end)
{
	size_t t = 0;
	while (t < r->n_tok && r->toks[t].off < end)
		t++;
	return t;
}

bool api__reply_read(const api__conn *k, api__choice *c, size_t end, bool final)
{
	shoal_reply_fini(&c->rp);
	return !shoal_reply_split(k->form, c->run->text ? c->run->text : "", end, final, &c->rp);
}

size_t api__parse_calls(const api__conn *k, api__choice *c)
{
	const char *t = c->rp.content ? c->rp.content : "";
	size_t end = c->rp.n_content;
	if (!k->syn)
		return end;
	if (!c->parsed) {
		c->parsed = !shoal_tool_parse(k->syn, t, end, &c->tp);
		c->n_calls = c->parsed ? api__tool_count(&k->q, &c->tp) : 0;
	}
	if (!c->n_calls)
		return end;
	size_t p = shoal_tool_hold(k->syn, t, end); /* where the calls open */
	while (p > 0 &&
	       (t[p - 1] == ' ' || t[p - 1] == '\n' || t[p - 1] == '\t' || t[p - 1] == '\r'))
		p--;
	return p;
}

bool api__calls_ok(const api__conn *k, const api__choice *c, char *why, size_t why_len)
{
	if (!k->syn)
		return true;
	if (!c->parsed)
		return snprintf(why, why_len, "out of memory"), false;
	return api__tool_choice_met(&k->q, &c->tp, why, why_len);
}

/* "length" when max_tokens or the context cut the reply (a run is given
 * at most the room the context leaves after its prompt). */
const char *api__finish_reason(const api__conn *k, const api__choice *c)
{
	if (c->n_calls)
		return "tool_calls";
	if (c->stopped)
		return "stop";
	if (c->run->n_tok >= k->q.g.max_tokens)
		return "length";
	if (k->ctx && k->q.n_prompt + c->run->n_tok >= k->ctx)
		return "length";
	return "stop";
}

void api__choices_cancel(api__conn *k)
{
	for (uint32_t i = 0; i < k->q.n; i++) {
		api__choice *c = &k->ch[i];
		if (c->submitted && !c->finished && !c->run->done) {
			c->finished = true;
			k->a->ops.cancel(k->a->ops.ctx, c->handle);
		}
	}
}

/* ----------------------------------------------------------------- logprobs */

/* The OpenAI "bytes" of a token text. */
static json_t *bytes_json(const char *s, size_t n)
{
	json_t *b = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(b, json_integer((unsigned char)s[i]));
	return b;
}

/* The length of a valid UTF-8 character at s[0..n), 0 if none. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	size_t len = s[0] < 0x80         ? 1
	             : (s[0] >> 5) == 6  ? 2
	             : (s[0] >> 4) == 14 ? 3
	             : (s[0] >> 3) == 30 ? 4
	                                 : 0;
	if (!len || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/* The longest token text shown in logprobs, in bytes; each byte may
 * become U+FFFD (3 bytes) in the JSON string. */
#define API_TOKEN_TEXT 256

/* A JSON string of s[n] with each byte that is not part of a valid UTF-8
 * character as U+FFFD (a byte token alone is not text). */
static json_t *text_json(const char *s, size_t n)
{
	char out[4 * API_TOKEN_TEXT];
	size_t o = 0;
	for (size_t i = 0; i < n && o + 4 < sizeof out;) {
		size_t l = utf8_char((const unsigned char *)s + i, n - i);
		if (l) {
			memcpy(out + o, s + i, l);
			o += l;
			i += l;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	return json_stringn(out, o);
}

static json_t *tok_text_json(shoal_api *a, int32_t id, bool with_bytes, json_t **bytes)
{
	char buf[API_TOKEN_TEXT];
	size_t n = a->ops.token_text(a->ops.ctx, id, buf, sizeof buf);
	if (with_bytes)
		*bytes = bytes_json(buf, n);
	return text_json(buf, n);
}

/* Chat logprobs of tokens [t0, t1): {"content": [...]}. */
static json_t *chat_logprobs(const api__conn *k, const api__run *r, size_t t0, size_t t1)
{
	json_t *content = json_array();
	for (size_t t = t0; t < t1; t++) {
		const api__tok *x = &r->toks[t];
		json_t *b, *top = json_array();
		json_t *tt = tok_text_json(k->a, x->id, true, &b);
		for (uint32_t j = 0; j < x->n_top && j < k->q.top; j++) {
			json_t *bb;
			json_t *ts = tok_text_json(k->a, x->top_ids[j], true, &bb);
			json_array_append_new(top, json_pack("{so sf so}", "token", ts, "logprob",
			                                     (double)x->top_lps[j], "bytes", bb));
		}
		json_array_append_new(content,
		                      json_pack("{so sf so so}", "token", tt, "logprob",
		                                (double)x->lp, "bytes", b, "top_logprobs", top));
	}
	return json_pack("{so}", "content", content);
}

/* Completions (legacy) logprobs of tokens [t0, t1), offsets in the text. */
static json_t *text_logprobs(const api__conn *k, const api__run *r, size_t t0, size_t t1)
{
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
	       *offs = json_array();
	for (size_t t = t0; t < t1; t++) {
		const api__tok *x = &r->toks[t];
		json_array_append_new(toks, tok_text_json(k->a, x->id, false, NULL));
		json_array_append_new(lps, json_real(x->lp));
		json_t *top = json_object();
		for (uint32_t j = 0; j < x->n_top && j < k->q.top; j++) {
			json_t *ts = tok_text_json(k->a, x->top_ids[j], false, NULL);
			if (ts)
				json_object_set_new(top, json_string_value(ts),
				                    json_real(x->top_lps[j]));
			json_decref(ts);
		}
		json_array_append_new(tops, top);
		json_array_append_new(offs, json_integer((json_int_t)x->off));
	}
	return json_pack("{so so so so}", "tokens", toks, "token_logprobs", lps, "top_logprobs",
	                 tops, "text_offset", offs);
}

json_t *api__logprobs(const api__conn *k, const api__choice *c, size_t t0, size_t t1)
{
	return k->q.chat ? chat_logprobs(k, c->run, t0, t1) : text_logprobs(k, c->run, t0, t1);
}

/* ---------------------------------------------------- the whole reply's parts */

json_t *api__choice_json(const api__conn *k, api__choice *c, uint32_t i)
{
	const api__run *r = c->run;
	bool hit;
	size_t end = api__visible_end(k, c, &hit);
	c->stopped |= hit;
	size_t nt = api__toks_before(r, end);
	c->n_out = nt;
	json_t *lp = k->q.logprobs ? api__logprobs(k, c, 0, nt) : json_null();
	const char *text = r->text ? r->text : "";
	if (k->q.chat) {
		if (!api__reply_read(k, c, end, true))
			return json_decref(lp), NULL;
		api__parse_calls(k, c);
		json_t *m = json_pack("{ss}", "role", "assistant");
		if (c->n_calls) {
			const char *ct = c->tp.content;
			json_object_set_new(m, "content", ct[0] ? json_string(ct) : json_null());
			json_object_set_new(m, "tool_calls",
			                    api__tool_calls_json(&c->tp, c->n_calls, c->base));
		} else {
			json_object_set_new(m, "content",
			                    json_stringn(c->rp.content, c->rp.n_content));
		}
		/* reasoning apart, as the APIs of reasoning models return it */
		if (c->rp.n_reasoning)
			json_object_set_new(m, "reasoning_content",
			                    json_stringn(c->rp.reasoning, c->rp.n_reasoning));
		return json_pack("{sI so so ss}", "index", (json_int_t)i, "message", m, "logprobs",
		                 lp, "finish_reason", api__finish_reason(k, c));
	}
	return json_pack("{ss% sI so ss}", "text", text, end, "index", (json_int_t)i, "logprobs",
	                 lp, "finish_reason", api__finish_reason(k, c));
}

/* The prompt is counted once: the choices share it (each choice's session
 * computes it, but a client asked for one prompt); the prefix cache's
 * share is the first choice's. */
json_t *api__usage_json(const api__conn *k)
{
	size_t out = 0;
	for (uint32_t i = 0; i < k->q.n; i++)
		out += k->ch[i].n_out;
	return json_pack("{sI sI sI s{sI}}", "prompt_tokens", (json_int_t)k->q.n_prompt,
	                 "completion_tokens", (json_int_t)out, "total_tokens",
	                 (json_int_t)(k->q.n_prompt + out), "prompt_tokens_details",
	                 "cached_tokens", (json_int_t)k->ch[0].run->cached);
}
