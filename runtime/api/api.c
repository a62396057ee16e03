/*
 * runtime/api/api.c: the OpenAI-compatible HTTP API (api.h) on libmicrohttpd
 * (a thread per connection) and jansson.
 *
 * A completion request is parsed and checked, turned into token ids by
 * ops.prompt and queued by ops.submit; its run fills a shared `api_run`
 * from the node's thread (the sink), and the connection's thread turns it
 * into one JSON reply or a stream of server-sent events. The HTTP status
 * waits for the run's first token or its end, so a refusal (queue full,
 * no plan) is a real 429 or 503; an error after the first token ends the
 * stream with an error event. Stop strings are cut here: text that could
 * begin one is held back until it cannot.
 *
 * Divisions: replies; runs (sink side); request parsing; completions;
 * streaming; the other routes; the daemon.
 */
#include "config.h"

#include "runtime/api/api.h"
#include "runtime/api/api_guard.h"
#include "runtime/api/api_impl.h"

#include "runtime/api/api_req.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>

#include "base/clock.h"
#include "base/log.h"
#include "models/grammar.h"

#define LOG_PART "api"
/* A stream with nothing to say for this long sends an SSE comment: a
 * client that went away is noticed on the write (and its run ended). */
#define API_KEEPALIVE_MS 1000
/* Connections one client address may hold: 3/4 of the limit (96 of the
 * default 128), so that one address never takes all (a proxy in front of
 * many users, or a test's 64 streams and its own requests, still fit);
 * slow clients spread over many addresses are the guard's (api_guard.c). */
#define API_PER_IP_CONNS(max_conns) ((max_conns) / 4u * 3u)

/* runtime/api/dashboard.html, built in (runtime/api/api.am) */
extern const char shoal_api_dashboard[];

struct shoal_api {
	shoal_api_config cfg;
	char *host, *key, *cors;
	/* the model's name ("" until known: a peer still without its weights
	 * takes any name and answers 503); shoal_api_set_model may change it */
	pthread_mutex_t model_mu;
	char model[256];
	shoal_api_ops ops;
	struct MHD_Daemon *d;
	api__guard *guard; /* slow clients (api_guard.c) */
	uint16_t port;
	atomic_uint_fast64_t seq;
	atomic_int stopping; /* waits on runs give up: the daemon is stopping */
	atomic_int streams;  /* SSE responses not yet freed (the stop waits for their ends) */
	/* counters for /metrics */
	atomic_uint_fast64_t req_ok, req_client_err, req_server_err, req_cancelled, tokens;
};

static void api_model(shoal_api *a, char *out, size_t cap)
{
	pthread_mutex_lock(&a->model_mu);
	snprintf(out, cap, "%s", a->model);
	pthread_mutex_unlock(&a->model_mu);
}

/* ---------------------------------------------------------------- replies */

/* The headers every reply carries: CORS when --api-cors names an origin
 * (a browser page there may read the reply and its seed header). */
static void api_headers(const shoal_api *a, struct MHD_Response *r)
{
	if (!a->cors)
		return;
	MHD_add_response_header(r, "Access-Control-Allow-Origin", a->cors);
	MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Shoal-Seed");
	if (strcmp(a->cors, "*"))
		MHD_add_response_header(r, "Vary", "Origin");
}

/* A reply; seed: the X-Shoal-Seed header's value (NULL: none). */
static enum MHD_Result api_reply(shoal_api *a, struct MHD_Connection *c, unsigned status,
                                 const char *type, const char *body, size_t len, const char *seed)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	api_headers(a, r);
	if (seed)
		MHD_add_response_header(r, "X-Shoal-Seed", seed);
	MHD_add_response_header(r, "Content-Type", type);
	if (status == 429) /* the queue is full: a slot frees within seconds */
		MHD_add_response_header(r, "Retry-After", "1");
	enum MHD_Result res = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return res;
}

static enum MHD_Result api_send(shoal_api *a, struct MHD_Connection *c, unsigned status,
                                const char *type, const char *body, size_t len)
{
	return api_reply(a, c, status, type, body, len, NULL);
}

static enum MHD_Result api_send_json(shoal_api *a, struct MHD_Connection *c, unsigned status,
                                     json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		return api_send(a, c, 500, "text/plain", "out of memory\n", 14);
	enum MHD_Result r = api_send(a, c, status, "application/json", s, strlen(s));
	free(s);
	return r;
}

/* OpenAI's error shape. */
static json_t *api_error_json(const char *type, const char *msg, const char *param,
                              const char *code)
{
	return json_pack("{s{ss ss so so}}", "error", "message", msg, "type", type, "param",
	                 param ? json_string(param) : json_null(), "code",
	                 code ? json_string(code) : json_null());
}

static enum MHD_Result api_fail(shoal_api *a, struct MHD_Connection *c, unsigned status,
                                const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static enum MHD_Result api_fail(shoal_api *a, struct MHD_Connection *c, unsigned status,
                                const char *param, const char *code, const char *fmt, ...)
{
	char msg[SHOAL_WHY_WRAP_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (status >= 500)
		a->req_server_err++;
	else
		a->req_client_err++;
	const char *type = status == 401   ? "authentication_error"
	                   : status == 429 ? "rate_limit_error"
	                   : status >= 500 ? "server_error"
	                                   : "invalid_request_error";
	return api_send_json(a, c, status, api_error_json(type, msg, param, code));
}

/* --------------------------------------------------------- runs (sink side) */

typedef struct api_tok {
	int32_t id;
	float lp;
	uint32_t n_top;
	int32_t top_ids[SHOAL_API_MAX_TOP];
	float top_lps[SHOAL_API_MAX_TOP];
	size_t off, len; /* its text in run.text */
} api_tok;

typedef struct api_run {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs; /* the connection and the run */
	/* filled by the sink */
	char *text;
	size_t len, cap;
	api_tok *toks;
	size_t n_tok, cap_tok;
	uint32_t cached; /* prompt tokens the prefix cache held */
	bool done, failed;
	shoal_err err;
	char why[SHOAL_WHY_LEN];
	/* set before the run starts: a whole reply with no stop strings, whose
	 * waiter needs the first token and the end only (not a wake-up per
	 * token: with 8 such requests those were ~10% of a peer's time) */
	bool quiet;
	/* test hook (api__test_reply): the text shown in place of the
	 * model's, a piece per token, the rest at the end */
	const char *forced;
	size_t forced_off;
} api_run;

static void run_unref(api_run *r)
{
	pthread_mutex_lock(&r->mu);
	int left = --r->refs;
	pthread_mutex_unlock(&r->mu);
	if (left)
		return;
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r->text);
	free(r->toks);
	free(r);
}

/* Append s[n] to the run's text (under mu); false when out of memory. */
static bool run_text(api_run *r, const char *s, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		size_t cap = (r->cap ? r->cap * 2 : 1024) + n;
		char *t = realloc(r->text, cap);
		if (!t)
			return false;
		r->text = t;
		r->cap = cap;
	}
	memcpy(r->text + r->len, s, n);
	r->len += n;
	r->text[r->len] = '\0';
	return true;
}

/* Wait on a run's condition (under its mu) for at most ms. */
static void run_wait(api_run *r, unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* The client of a request we are still answering closed its end (HTTP
 * clients send nothing more after the request, so EOF means gone). */
static bool api_client_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return false;
	int fd = ci->connect_fd;
#ifdef POLLRDHUP
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
#else
	struct pollfd p = {.fd = fd, .events = POLLIN};
#endif
	if (poll(&p, 1, 0) <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLERR))
		return true;
	char b;
	return (p.revents & POLLIN) && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void sink_token(void *ctx, int32_t id, const char *text, size_t len, float lp,
                       uint32_t n_top, const int32_t *top_ids, const float *top_lps)
{
	api_run *r = ctx;
	pthread_mutex_lock(&r->mu);
	if (r->n_tok == r->cap_tok) {
		size_t cap = r->cap_tok ? 2 * r->cap_tok : 64;
		api_tok *t = realloc(r->toks, cap * sizeof *t);
		if (t) {
			r->toks = t;
			r->cap_tok = cap;
		}
	}
	if (r->n_tok < r->cap_tok) {
		api_tok *t = &r->toks[r->n_tok++];
		t->id = id;
		t->lp = lp;
		t->n_top = n_top < SHOAL_API_MAX_TOP ? n_top : SHOAL_API_MAX_TOP;
		memcpy(t->top_ids, top_ids, t->n_top * sizeof *top_ids);
		memcpy(t->top_lps, top_lps, t->n_top * sizeof *top_lps);
		t->off = r->len;
		if (r->forced) { /* test hook: the forced text's next piece */
			size_t left = strlen(r->forced + r->forced_off);
			len = left < 8 ? left : 8;
			text = r->forced + r->forced_off;
			r->forced_off += len;
		}
		t->len = run_text(r, text, len) ? len : 0;
	}
	if (!r->quiet || r->n_tok <= 1)
		pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

static void sink_cached(void *ctx, uint32_t cached)
{
	api_run *r = ctx;
	pthread_mutex_lock(&r->mu);
	r->cached = cached;
	pthread_mutex_unlock(&r->mu);
}

static void sink_end(void *ctx, shoal_err err, const char *why, const char *tail, size_t tail_len)
{
	api_run *r = ctx;
	pthread_mutex_lock(&r->mu);
	if (!err && r->forced) { /* test hook: the rest of the forced text */
		tail = r->forced + r->forced_off;
		tail_len = strlen(tail);
	}
	if (!err && tail_len)
		run_text(r, tail, tail_len);
	r->done = true;
	r->err = err;
	snprintf(r->why, sizeof r->why, "%s", why ? why : "");
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	run_unref(r);
}

/* Per connection. */
typedef struct api_conn {
	char *body;
	size_t len;
	bool too_big;
	/* a completion in progress */
	shoal_api *a;
	api_run *run;
	uint32_t handle;
	bool submitted, finished; /* finished: the run ended or was cancelled by us */
	bool counted;             /* an SSE response counted in a->streams */
	shoal_api_req q;
	char id[40];
	char model[256]; /* the API's model name when the request came */
	char seed[24];   /* the run's seed in decimal: X-Shoal-Seed */
	char fingerprint[32];
	uint32_t ctx; /* the context size when the request came (0: unknown) */
	/* function calls: the model's tool syntax (NONE: tools not offered),
	 * the reply's text read as calls once the run ended, how many it has */
	shoal_chat_tools syn;
	shoal_tool_parsed tp;
	bool parsed;
	size_t n_calls;
	long long created;
	/* streaming: what was sent, what waits to be sent */
	size_t sent_tok, sent_text;
	size_t seen_tok, seen_text; /* the run's counts at the last step (text may be held) */
	bool stopped, role_sent, end_sent;
	char *out;
	size_t out_len, out_off, out_cap;
} api_conn;

/* --------------------------------------------------------------- completions */

/* "length" when max_tokens or the context cut the reply (a run is given
 * at most the room the context leaves after its prompt). */
static const char *finish_reason(const api_conn *k)
{
	if (k->n_calls)
		return "tool_calls";
	if (k->stopped)
		return "stop";
	if (k->run->n_tok >= k->q.g.max_tokens)
		return "length";
	if (k->ctx && k->q.n_prompt + k->run->n_tok >= k->ctx)
		return "length";
	return "stop";
}

/* Where the text the client may see ends: before a stop string (found:
 * *hit set), or, while the run goes on, before a tail that could still
 * become one. Under run.mu. */
static size_t visible_end(api_conn *k, bool *hit)
{
	api_run *r = k->run;
	*hit = false;
	size_t end = r->len;
	for (size_t i = 0; i < k->q.n_stop; i++) {
		const char *p = strstr(r->text ? r->text : "", k->q.stop[i]);
		if (p && (size_t)(p - r->text) < end) {
			end = (size_t)(p - r->text);
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
			if (strlen(k->q.stop[i]) > l && !memcmp(r->text + end - l, k->q.stop[i], l))
				return end - l;
	}
	return end;
}

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

/* A JSON string of s[n] with each byte that is not part of a valid UTF-8
 * character as U+FFFD (a byte token alone is not text). */
static json_t *text_json(const char *s, size_t n)
{
	char out[4 * 256];
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
	char buf[256];
	size_t n = a->ops.token_text(a->ops.ctx, id, buf, sizeof buf);
	if (with_bytes)
		*bytes = bytes_json(buf, n);
	return text_json(buf, n);
}

/* Chat logprobs of tokens [t0, t1): {"content": [...]}. */
static json_t *chat_logprobs(api_conn *k, size_t t0, size_t t1)
{
	json_t *content = json_array();
	for (size_t t = t0; t < t1; t++) {
		const api_tok *x = &k->run->toks[t];
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

/* Completions (legacy) logprobs of tokens [t0, t1), offsets from base. */
static json_t *text_logprobs(api_conn *k, size_t t0, size_t t1)
{
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
	       *offs = json_array();
	for (size_t t = t0; t < t1; t++) {
		const api_tok *x = &k->run->toks[t];
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

/* Tokens whose text starts before `end`: the ones the client gets. */
static size_t toks_before(const api_run *r, size_t end)
{
	size_t t = 0;
	while (t < r->n_tok && r->toks[t].off < end)
		t++;
	return t;
}

static json_t *usage_json(const api_conn *k, size_t n_tok)
{
	return json_pack("{sI sI sI s{sI}}", "prompt_tokens", (json_int_t)k->q.n_prompt,
	                 "completion_tokens", (json_int_t)n_tok, "total_tokens",
	                 (json_int_t)(k->q.n_prompt + n_tok), "prompt_tokens_details",
	                 "cached_tokens", (json_int_t)k->run->cached);
}

/* Read the reply's text[0..end) as function calls, once, when it is
 * final (under run.mu); then the offset where its content ends. */
static size_t parse_calls(api_conn *k, size_t end)
{
	const char *t = k->run->text ? k->run->text : "";
	if (!k->syn)
		return end;
	if (!k->parsed) {
		k->parsed = !shoal_tool_parse(k->syn, t, end, &k->tp);
		k->n_calls = k->parsed ? api__tool_count(&k->q, &k->tp) : 0;
	}
	if (!k->n_calls)
		return end;
	size_t c = shoal_tool_hold(k->syn, t, end); /* where the calls open */
	while (c > 0 &&
	       (t[c - 1] == ' ' || t[c - 1] == '\n' || t[c - 1] == '\t' || t[c - 1] == '\r'))
		c--;
	return c;
}

/* Why a tool_choice that wants a call is not met (false), under run.mu
 * after parse_calls. */
static bool calls_ok(api_conn *k, char *why, size_t why_len)
{
	if (!k->syn)
		return true;
	if (!k->parsed)
		return snprintf(why, why_len, "out of memory"), false;
	return api__tool_choice_met(&k->q, &k->tp, why, why_len);
}

/* The whole reply of a finished run (under run.mu). */
static json_t *whole_reply(api_conn *k)
{
	bool hit;
	size_t end = visible_end(k, &hit);
	k->stopped |= hit;
	size_t nt = toks_before(k->run, end);
	parse_calls(k, end);
	json_t *choice;
	if (k->n_calls) {
		const char *ct = k->tp.content;
		choice =
		    json_pack("{sI s{ss so so} so ss}", "index", (json_int_t)0, "message", "role",
		              "assistant", "content", ct[0] ? json_string(ct) : json_null(),
		              "tool_calls", api__tool_calls_json(&k->tp, k->n_calls, k->id + 9),
		              "logprobs", k->q.logprobs ? chat_logprobs(k, 0, nt) : json_null(),
		              "finish_reason", finish_reason(k));
	} else if (k->q.chat)
		choice =
		    json_pack("{sI s{ss ss%} so ss}", "index", (json_int_t)0, "message", "role",
		              "assistant", "content", k->run->text ? k->run->text : "", end,
		              "logprobs", k->q.logprobs ? chat_logprobs(k, 0, nt) : json_null(),
		              "finish_reason", finish_reason(k));
	else
		choice = json_pack("{ss% sI so ss}", "text", k->run->text ? k->run->text : "", end,
		                   "index", (json_int_t)0, "logprobs",
		                   k->q.logprobs ? text_logprobs(k, 0, nt) : json_null(),
		                   "finish_reason", finish_reason(k));
	return json_pack("{ss ss sI ss ss s[o] so}", "id", k->id, "object",
	                 k->q.chat ? "chat.completion" : "text_completion", "created",
	                 (json_int_t)k->created, "model", k->model, "system_fingerprint",
	                 k->fingerprint, "choices", choice, "usage", usage_json(k, nt));
}

/* ----------------------------------------------------------------- streaming */

static bool out_add(api_conn *k, const char *s, size_t n)
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

/* "data: JSON\n\n" */
static void out_event(api_conn *k, json_t *j)
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

static json_t *chunk(api_conn *k, json_t *choice)
{
	return json_pack("{ss ss sI ss ss s[o]}", "id", k->id, "object",
	                 k->q.chat ? "chat.completion.chunk" : "text_completion", "created",
	                 (json_int_t)k->created, "model", k->model, "system_fingerprint",
	                 k->fingerprint, "choices", choice);
}

/* Queue the events for what the run produced since the last call (under
 * run.mu); at the end the closing events. */
static void stream_step(api_conn *k)
{
	api_run *r = k->run;
	bool hit;
	size_t end = visible_end(k, &hit);
	if (hit && !k->stopped) {
		k->stopped = true;
		if (!k->finished) { /* the text is cut: the rest is not wanted */
			k->finished = true;
			k->a->ops.cancel(k->a->ops.ctx, k->handle);
		}
	}
	bool final = r->done || k->stopped;
	k->seen_tok = r->n_tok;
	k->seen_text = r->len;
	if (k->syn && !final) { /* what may be a call waits for the end */
		size_t h = shoal_tool_hold(k->syn, r->text ? r->text : "", end);
		end = h < end ? h : end;
		while (end > k->sent_text && (r->text[end - 1] == ' ' || r->text[end - 1] == '\n' ||
		                              r->text[end - 1] == '\t' || r->text[end - 1] == '\r'))
			end--; /* white space before a call is not content */
	} else if (k->syn && !(r->done && r->err && !k->stopped)) {
		end = parse_calls(k, end);
	}
	if (end < k->sent_text)
		end = k->sent_text;
	size_t nt = toks_before(r, end);
	if (k->q.chat && !k->role_sent) {
		out_event(k,
		          chunk(k, json_pack("{sI s{ss ss} so so}", "index", (json_int_t)0, "delta",
		                             "role", "assistant", "content", "", "logprobs",
		                             json_null(), "finish_reason", json_null())));
		k->role_sent = true;
	}
	if (end > k->sent_text) {
		const char *t = r->text + k->sent_text;
		size_t n = end - k->sent_text;
		json_t *lp = json_null();
		if (k->q.logprobs && nt > k->sent_tok)
			lp = k->q.chat ? chat_logprobs(k, k->sent_tok, nt)
			               : text_logprobs(k, k->sent_tok, nt);
		json_t *choice =
		    k->q.chat
		        ? json_pack("{sI s{ss%} so so}", "index", (json_int_t)0, "delta", "content",
		                    t, n, "logprobs", lp, "finish_reason", json_null())
		        : json_pack("{ss% sI so so}", "text", t, n, "index", (json_int_t)0,
		                    "logprobs", lp, "finish_reason", json_null());
		out_event(k, chunk(k, choice));
		k->sent_text = end;
		k->sent_tok = nt;
	}
	if (!(r->done || k->stopped) || k->end_sent)
		return;
	char why[SHOAL_WHY_LEN];
	if (r->done && r->err && !k->stopped) {
		/* cut by the cluster: say so, never a silent close */
		out_event(k, api_error_json("server_error", r->why[0] ? r->why : "the run failed",
		                            NULL, NULL));
		k->a->req_server_err++;
	} else if (!calls_ok(k, why, sizeof why)) {
		out_event(k,
		          api_error_json("server_error", why, "tool_choice", "tool_call_missing"));
		k->a->req_server_err++;
	} else {
		json_t *ds = k->n_calls ? api__tool_deltas(&k->tp, k->n_calls, k->id + 9) : NULL;
		for (size_t i = 0; i < json_array_size(ds); i++)
			out_event(k,
			          chunk(k, json_pack("{sI sO so so}", "index", (json_int_t)0,
			                             "delta", json_array_get(ds, i), "logprobs",
			                             json_null(), "finish_reason", json_null())));
		json_decref(ds);
		json_t *choice =
		    k->q.chat
		        ? json_pack("{sI s{} so ss}", "index", (json_int_t)0, "delta", "logprobs",
		                    json_null(), "finish_reason", finish_reason(k))
		        : json_pack("{ss sI so ss}", "text", "", "index", (json_int_t)0, "logprobs",
		                    json_null(), "finish_reason", finish_reason(k));
		out_event(k, chunk(k, choice));
		if (k->q.usage) {
			json_t *u =
			    json_pack("{ss ss sI ss s[] so}", "id", k->id, "object",
			              k->q.chat ? "chat.completion.chunk" : "text_completion",
			              "created", (json_int_t)k->created, "model", k->model,
			              "choices", "usage", usage_json(k, nt));
			out_event(k, u);
		}
		k->a->req_ok++;
	}
	out_add(k, "data: [DONE]\n\n", 14);
	k->end_sent = true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	api_conn *k = cls;
	api_run *r = k->run;
	while (k->out_off == k->out_len) {
		if (k->end_sent)
			return MHD_CONTENT_READER_END_OF_STREAM;
		k->out_len = k->out_off = 0;
		if (k->a->stopping) {
			/* the node that owns the run stops: say so, never a
			 * silent close (shoal_api_stop waits for this) */
			out_event(k, api_error_json("server_error",
			                            "the peer serving this request is stopping",
			                            NULL, NULL));
			k->a->req_server_err++;
			out_add(k, "data: [DONE]\n\n", 14);
			k->end_sent = true;
			continue;
		}
		pthread_mutex_lock(&r->mu);
		if (!r->done && r->n_tok == k->seen_tok && r->len == k->seen_text)
			run_wait(r, API_KEEPALIVE_MS);
		size_t before = k->out_len;
		stream_step(k);
		if (k->out_len == before && !k->end_sent)
			out_add(k, ": keepalive\n\n", 13);
		pthread_mutex_unlock(&r->mu);
	}
	size_t n = k->out_len - k->out_off < max ? k->out_len - k->out_off : max;
	memcpy(buf, k->out + k->out_off, n);
	k->out_off += n;
	return (ssize_t)n;
}

static void stream_free(void *cls)
{
	(void)cls; /* the connection's state goes in api_completed */
}

/* Wait for the run's first token or its end (under nothing); true: it
 * produced something or ended well, false: it ended with an error first
 * (or the daemon stops). */
static bool wait_first(shoal_api *a, api_run *r)
{
	pthread_mutex_lock(&r->mu);
	while (!r->done && !r->n_tok && !a->stopping)
		run_wait(r, API_KEEPALIVE_MS);
	bool ok = r->n_tok || (r->done && !r->err);
	if (!ok && !r->done) {
		r->err = SHOAL_ERR_STATE;
		snprintf(r->why, sizeof r->why, "the node is stopping");
	}
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static unsigned status_of(shoal_err e)
{
	switch (e) {
	case SHOAL_ERR_BUSY:
		return 429;
	case SHOAL_ERR_INFEASIBLE:
	case SHOAL_ERR_TIMEOUT:
	case SHOAL_ERR_STATE:
		return 503;
	case SHOAL_ERR_INVAL:
	case SHOAL_ERR_RANGE:
	case SHOAL_ERR_UNSUPPORTED:
		return 400;
	default:
		return 500;
	}
}

/* A seed for a request without one: random, below 2^53 so that a client
 * in JavaScript (numbers are doubles) can send it back exactly. */
static uint64_t fresh_seed(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) /* never blocks after boot */
		v = (uint64_t)shoal_clock_now_us() * 0x9e3779b97f4a7c15ull;
	return v & ((1ull << 53) - 1);
}

static enum MHD_Result api_complete(shoal_api *a, struct MHD_Connection *c, api_conn *k, bool chat)
{
	char bad[SHOAL_WHY_LEN] = "";
	const char *param = NULL;
	unsigned status;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	enum MHD_Result res;
	char why[SHOAL_WHY_LEN] = "";
	api_model(a, k->model, sizeof k->model);
	if (shoal_api_req_parse(k->body, k->len, chat, k->model[0] ? k->model : NULL, &k->q,
	                        &status, &param, bad, sizeof bad)) {
		res = api_fail(a, c, status, param, status == 404 ? "model_not_found" : NULL, "%s",
		               bad);
		goto out;
	}
	if (!k->q.seeded)
		k->q.g.seed = fresh_seed();
	snprintf(k->seed, sizeof k->seed, "%" PRIu64, k->q.g.seed);
	snprintf(k->fingerprint, sizeof k->fingerprint, "shoal-seed-%" PRIu64, k->q.g.seed);
	bool offer = k->q.tools && k->q.tool_choice != SHOAL_API_TOOL_NONE;
	if (offer) {
		shoal_chat_style st = SHOAL_CHAT_PLAIN;
		shoal_err se = a->ops.chat_style ? a->ops.chat_style(a->ops.ctx, &st) : SHOAL_OK;
		if (se) {
			res = api_fail(a, c, status_of(se) == 500 ? 503 : status_of(se), NULL, NULL,
			               "the model's chat format is not known yet: %s",
			               shoal_strerror(se));
			goto out;
		}
		if (!(k->syn = shoal_chat_tool_syntax(st))) {
			res = api_fail(
			    a, c, 400, "tools", "tools_unsupported",
			    "the model's chat template (%s) defines no tool calls: send no "
			    "'tools', or tool_choice \"none\"",
			    shoal_chat_style_name(st));
			goto out;
		}
		/* the syntaxes of Llama 3.1, Mistral and DeepSeek are control tokens */
		k->q.g.special = k->syn != SHOAL_CHAT_TOOLS_HERMES;
		/* a call is required: the reply is constrained to one, in the
		 * model's syntax, by the grammar the last stage samples under
		 * (it replaces a response_format: the reply is a call) */
		if (k->q.tool_choice == SHOAL_API_TOOL_REQUIRED ||
		    k->q.tool_choice == SHOAL_API_TOOL_NAMED) {
			shoal_grammar_prog gp = {0};
			char gw[SHOAL_WHY_LEN] = "";
			shoal_err ge = shoal_grammar_tools(
			    k->syn, k->q.tools,
			    k->q.tool_choice == SHOAL_API_TOOL_NAMED ? k->q.tool_name : NULL, &gp,
			    gw, sizeof gw);
			if (ge) {
				res =
				    api_fail(a, c, ge == SHOAL_ERR_NOMEM ? 500 : 400, "tools", NULL,
				             "tool_choice: the functions' parameters: %s", gw);
				goto out;
			}
			free(k->q.g.grammar);
			k->q.g.grammar = gp.w;
			k->q.g.n_grammar = gp.n;
		}
	}
	shoal_err e =
	    a->ops.prompt(a->ops.ctx, chat ? k->q.msgs : NULL, k->q.n_msgs,
	                  offer ? k->q.tools : NULL, k->q.prompt, &ids, &n_ids, why, sizeof why);
	if (e) {
		res = api_fail(a, c, status_of(e) == 500 ? 400 : status_of(e),
		               chat ? "messages" : "prompt", NULL, "the prompt: %s",
		               why[0] ? why : shoal_strerror(e));
		goto out;
	}
	k->q.n_prompt = n_ids;
	k->ctx = a->ops.context ? a->ops.context(a->ops.ctx) : 0;
	k->run = calloc(1, sizeof *k->run);
	if (!k->run) {
		res = api_fail(a, c, 500, NULL, NULL, "out of memory");
		goto out;
	}
	pthread_mutex_init(&k->run->mu, NULL);
	pthread_cond_init(&k->run->cv, NULL);
	k->run->refs = 2;
	k->run->quiet = !k->q.stream && !k->q.n_stop;
	k->run->forced = api__test_reply(&k->q);
	shoal_api_sink sink = {
	    .on_token = sink_token, .on_end = sink_end, .on_cached = sink_cached, .ctx = k->run};
	e = a->ops.submit(a->ops.ctx, ids, n_ids, &k->q.g, &sink, &k->handle, why, sizeof why);
	if (e) {
		k->run->refs = 1; /* the run never started */
		res = api_fail(a, c, status_of(e), NULL, NULL, "%s",
		               why[0] ? why : shoal_strerror(e));
		goto out;
	}
	k->submitted = true;
	snprintf(k->id, sizeof k->id, "%s-%016" PRIxFAST64, chat ? "chatcmpl" : "cmpl",
	         (uint_fast64_t)++a->seq);
	k->created = (long long)time(NULL);
	if (!wait_first(a, k->run)) {
		k->finished = true;
		res = api_fail(a, c, status_of(k->run->err), NULL, NULL, "%s",
		               k->run->why[0] ? k->run->why : shoal_strerror(k->run->err));
		goto out;
	}
	if (!k->q.stream) {
		pthread_mutex_lock(&k->run->mu);
		bool gone = false;
		while (!k->run->done && !a->stopping && !gone) {
			bool hit;
			visible_end(k, &hit);
			if (hit && !k->finished) { /* cut at a stop string: end the run */
				k->finished = true;
				k->stopped = true;
				a->ops.cancel(a->ops.ctx, k->handle);
			}
			run_wait(k->run, 200);
			gone = api_client_gone(c);
		}
		if (gone) {
			/* a whole reply nobody waits for: api_completed cancels
			 * the run and frees its session now, not at its end */
			pthread_mutex_unlock(&k->run->mu);
			res = MHD_NO;
			goto out;
		}
		if (!k->run->done) {
			k->run->err = SHOAL_ERR_STATE;
			snprintf(k->run->why, sizeof k->run->why, "the node is stopping");
		} else {
			k->finished = true;
		}
		bool cut = (k->run->err || !k->run->done) && !k->stopped;
		json_t *j = cut ? NULL : whole_reply(k);
		char w[SHOAL_WHY_LEN];
		snprintf(w, sizeof w, "%s", k->run->why);
		shoal_err re = k->run->err;
		bool met = cut || calls_ok(k, w, sizeof w);
		pthread_mutex_unlock(&k->run->mu);
		if (!met) {
			json_decref(j);
			res = api_fail(a, c, 500, "tool_choice", "tool_call_missing", "%s", w);
		} else if (cut) {
			res = api_fail(a, c, status_of(re), NULL, NULL, "the run was cut: %s",
			               w[0] ? w : shoal_strerror(re));
		} else {
			a->req_ok++;
			char *s = json_dumps(j, JSON_COMPACT);
			json_decref(j);
			res = s ? api_reply(a, c, 200, "application/json", s, strlen(s), k->seed)
			        : api_send(a, c, 500, "text/plain", "out of memory\n", 14);
			free(s);
		}
		goto out;
	}
	struct MHD_Response *r =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, k, stream_free);
	if (!r) {
		res = MHD_NO;
		goto out;
	}
	a->streams++; /* until api_completed */
	k->counted = true;
	api_headers(a, r);
	MHD_add_response_header(r, "X-Shoal-Seed", k->seed);
	MHD_add_response_header(r, "Content-Type", "text/event-stream");
	MHD_add_response_header(r, "Cache-Control", "no-cache");
	res = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
out:
	free(ids);
	return res;
}

/* ---------------------------------------------------------- the other routes */

static enum MHD_Result api_models(shoal_api *a, struct MHD_Connection *c)
{
	char m[256];
	api_model(a, m, sizeof m);
	a->req_ok++;
	if (!m[0]) /* not known yet */
		return api_send_json(a, c, 200, json_pack("{ss s[]}", "object", "list", "data"));
	return api_send_json(a, c, 200,
	                     json_pack("{ss s[{ss ss sI ss}]}", "object", "list", "data", "id", m,
	                               "object", "model", "created", (json_int_t)0, "owned_by",
	                               "shoal"));
}

/* GET /v1/models/{id}: the one model, or 404. */
static enum MHD_Result api_model_get(shoal_api *a, struct MHD_Connection *c, const char *id)
{
	char m[256];
	api_model(a, m, sizeof m);
	if (!m[0] || strcmp(id, m))
		return api_fail(a, c, 404, "model", "model_not_found",
		                "the model '%.*s' is not served here%s%s%s", 128, id,
		                m[0] ? " (this cluster serves '" : "", m, m[0] ? "')" : "");
	a->req_ok++;
	return api_send_json(a, c, 200,
	                     json_pack("{ss ss sI ss}", "id", m, "object", "model", "created",
	                               (json_int_t)0, "owned_by", "shoal"));
}

/* A CORS preflight (OPTIONS): what a page at the --api-cors origin may send. */
static enum MHD_Result api_preflight(shoal_api *a, struct MHD_Connection *c)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	api_headers(a, r);
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
	                        "Authorization, Content-Type, OpenAI-Organization, "
	                        "OpenAI-Project, X-Stainless-Arch, X-Stainless-Lang, "
	                        "X-Stainless-OS, X-Stainless-Package-Version, "
	                        "X-Stainless-Runtime, X-Stainless-Runtime-Version, "
	                        "X-Stainless-Retry-Count, X-Stainless-Timeout");
	MHD_add_response_header(r, "Access-Control-Max-Age",
	                        "600"); /* 10 min of cached preflights */
	enum MHD_Result res = MHD_queue_response(c, 204, r);
	MHD_destroy_response(r);
	a->req_ok++;
	return res;
}

static enum MHD_Result api_cluster(shoal_api *a, struct MHD_Connection *c)
{
	char *s = a->ops.cluster_json ? a->ops.cluster_json(a->ops.ctx) : NULL;
	if (!s)
		return api_fail(a, c, 503, NULL, NULL, "no cluster view yet");
	a->req_ok++;
	enum MHD_Result r = api_send(a, c, 200, "application/json", s, strlen(s));
	free(s);
	return r;
}

static void metric(char **b, size_t *n, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void metric(char **b, size_t *n, size_t *cap, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int w = vsnprintf(*b ? *b + *n : NULL, *b ? *cap - *n : 0, fmt, ap);
		va_end(ap);
		if (w < 0)
			return;
		if (*b && *n + (size_t)w < *cap) {
			*n += (size_t)w;
			return;
		}
		size_t nc = (*cap ? *cap * 2 : 4096) + (size_t)w;
		char *nb = realloc(*b, nc);
		if (!nb)
			return;
		*b = nb;
		*cap = nc;
	}
}

/* Prometheus text format: this peer's API and stage counters. */
static enum MHD_Result api_metrics(shoal_api *a, struct MHD_Connection *c)
{
	shoal_api_gauges g;
	memset(&g, 0, sizeof g);
	if (a->ops.gauges)
		a->ops.gauges(a->ops.ctx, &g);
	char *b = NULL;
	size_t n = 0, cap = 0;
	metric(&b, &n, &cap,
	       "# HELP shoal_requests_total API requests by outcome.\n"
	       "# TYPE shoal_requests_total counter\n"
	       "shoal_requests_total{outcome=\"ok\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"client_error\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"server_error\"} %" PRIuFAST64 "\n"
	       "shoal_requests_total{outcome=\"cancelled\"} %" PRIuFAST64 "\n",
	       (uint_fast64_t)a->req_ok, (uint_fast64_t)a->req_client_err,
	       (uint_fast64_t)a->req_server_err, (uint_fast64_t)a->req_cancelled);
	metric(&b, &n, &cap,
	       "# HELP shoal_tokens_generated_total Tokens streamed to API clients.\n"
	       "# TYPE shoal_tokens_generated_total counter\n"
	       "shoal_tokens_generated_total %" PRIuFAST64 "\n"
	       "# HELP shoal_queue_length Requests waiting for a session.\n"
	       "# TYPE shoal_queue_length gauge\nshoal_queue_length %u\n"
	       "# HELP shoal_active_sessions Requests running.\n"
	       "# TYPE shoal_active_sessions gauge\nshoal_active_sessions %u\n",
	       (uint_fast64_t)a->tokens, g.queued, g.running);
	uint32_t conns = 0;
	uint64_t shed_late = 0, shed_room = 0;
	api__guard_counts(a->guard, &conns, &shed_late, &shed_room);
	metric(&b, &n, &cap,
	       "# HELP shoal_api_connections Open API connections.\n"
	       "# TYPE shoal_api_connections gauge\nshoal_api_connections %u\n"
	       "# HELP shoal_api_connections_shed_total Connections closed for a late request "
	       "(slow clients) or to make room.\n"
	       "# TYPE shoal_api_connections_shed_total counter\n"
	       "shoal_api_connections_shed_total{reason=\"late\"} %" PRIu64 "\n"
	       "shoal_api_connections_shed_total{reason=\"room\"} %" PRIu64 "\n",
	       conns, shed_late, shed_room);
	metric(
	    &b, &n, &cap,
	    "# HELP shoal_queue_paused Queued requests paused by a plan change (they go first).\n"
	    "# TYPE shoal_queue_paused gauge\nshoal_queue_paused %u\n"
	    "# HELP shoal_queue_oldest_wait_seconds How long the longest-waiting queued request "
	    "has waited.\n"
	    "# TYPE shoal_queue_oldest_wait_seconds gauge\n"
	    "shoal_queue_oldest_wait_seconds %.6f\n"
	    "# HELP shoal_queue_wait_seconds Waits in the queue of the requests started.\n"
	    "# TYPE shoal_queue_wait_seconds summary\n"
	    "shoal_queue_wait_seconds_sum %.6f\nshoal_queue_wait_seconds_count %" PRIu64 "\n"
	    "# HELP shoal_queue_wait_max_seconds The longest wait in the queue so far.\n"
	    "# TYPE shoal_queue_wait_max_seconds gauge\nshoal_queue_wait_max_seconds %.6f\n",
	    g.queued_paused, (double)g.queue_oldest_us / 1e6, (double)g.wait_sum_us / 1e6, g.wait_n,
	    (double)g.wait_max_us / 1e6);
	metric(&b, &n, &cap,
	       "# HELP shoal_stage_runs_total Engine runs of this peer's stage.\n"
	       "# TYPE shoal_stage_runs_total counter\nshoal_stage_runs_total %" PRIu64 "\n"
	       "# HELP shoal_stage_batched_runs_total Runs with rows of several sessions.\n"
	       "# TYPE shoal_stage_batched_runs_total counter\n"
	       "shoal_stage_batched_runs_total %" PRIu64 "\n"
	       "# HELP shoal_stage_rows_total Rows run by this peer's stage.\n"
	       "# TYPE shoal_stage_rows_total counter\nshoal_stage_rows_total %" PRIu64 "\n"
	       "# HELP shoal_hop_frames_total Frames this stage sent on (hidden states, results).\n"
	       "# TYPE shoal_hop_frames_total counter\n"
	       "shoal_hop_frames_total{kind=\"hidden\"} %" PRIu64 "\n"
	       "shoal_hop_frames_total{kind=\"token\"} %" PRIu64 "\n"
	       "# HELP shoal_hop_bytes_total Bytes of the hidden-state frames this stage sent.\n"
	       "# TYPE shoal_hop_bytes_total counter\nshoal_hop_bytes_total %" PRIu64 "\n"
	       "# HELP shoal_stage_step_seconds The latest run of this peer's stage.\n"
	       "# TYPE shoal_stage_step_seconds gauge\nshoal_stage_step_seconds %.9f\n",
	       g.stage_runs, g.stage_batched_runs, g.stage_rows, g.hidden_frames, g.token_frames,
	       g.hidden_bytes, (double)g.stage_last_run_ns / 1e9);
	metric(&b, &n, &cap,
	       "# HELP shoal_prefix_hits_total Sessions this stage started from kept KV.\n"
	       "# TYPE shoal_prefix_hits_total counter\nshoal_prefix_hits_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_hit_tokens_total Prompt positions this stage did not compute.\n"
	       "# TYPE shoal_prefix_hit_tokens_total counter\n"
	       "shoal_prefix_hit_tokens_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_evictions_total Kept sessions this stage freed for room.\n"
	       "# TYPE shoal_prefix_evictions_total counter\n"
	       "shoal_prefix_evictions_total %" PRIu64 "\n"
	       "# HELP shoal_prefix_entries Ended sessions whose KV this stage keeps.\n"
	       "# TYPE shoal_prefix_entries gauge\nshoal_prefix_entries %" PRIu64 "\n"
	       "# HELP shoal_prefix_tokens Positions of KV kept in the prefix cache.\n"
	       "# TYPE shoal_prefix_tokens gauge\nshoal_prefix_tokens %" PRIu64 "\n"
	       "# HELP shoal_prefix_bytes Bytes of KV kept in the prefix cache.\n"
	       "# TYPE shoal_prefix_bytes gauge\nshoal_prefix_bytes %" PRIu64 "\n",
	       g.prefix_hits, g.prefix_hit_tokens, g.prefix_evictions, g.prefix_entries,
	       g.prefix_tokens, g.prefix_bytes);
	metric(&b, &n, &cap,
	       "# HELP shoal_spec_drafted_total Token ids drafted for this peer's sessions.\n"
	       "# TYPE shoal_spec_drafted_total counter\nshoal_spec_drafted_total %" PRIu64 "\n"
	       "# HELP shoal_spec_accepted_total Drafted ids kept (tokens without a step).\n"
	       "# TYPE shoal_spec_accepted_total counter\nshoal_spec_accepted_total %" PRIu64 "\n",
	       g.spec_drafted, g.spec_accepted);
	/* gossip state and link RTT per peer, from the cluster view */
	char *cj = a->ops.cluster_json ? a->ops.cluster_json(a->ops.ctx) : NULL;
	json_t *v = cj ? json_loads(cj, 0, NULL) : NULL;
	free(cj);
	json_t *peers = json_object_get(v, "peers");
	size_t i;
	json_t *p;
	metric(&b, &n, &cap,
	       "# HELP shoal_peer_state Gossip state of each peer (1 for its state).\n"
	       "# TYPE shoal_peer_state gauge\n");
	json_array_foreach(peers, i, p)
	{
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *st = json_string_value(json_object_get(p, "state"));
		metric(&b, &n, &cap, "shoal_peer_state{peer=\"%s\",state=\"%s\"} 1\n",
		       name ? name : "?", st ? st : "?");
	}
	metric(&b, &n, &cap,
	       "# HELP shoal_link_rtt_seconds Measured round trip to a peer.\n"
	       "# TYPE shoal_link_rtt_seconds gauge\n");
	json_array_foreach(peers, i, p)
	{
		if (!json_is_true(json_object_get(p, "self")))
			continue;
		size_t j;
		json_t *l;
		json_array_foreach(json_object_get(p, "links"), j, l)
		{
			const char *to = json_string_value(json_object_get(l, "peer"));
			json_t *rtt = json_object_get(l, "rtt_us");
			if (to && json_is_integer(rtt))
				metric(&b, &n, &cap,
				       "shoal_link_rtt_seconds{peer=\"%.32s\"} %.6f\n", to,
				       (double)json_integer_value(rtt) / 1e6);
		}
	}
	json_decref(v);
	a->req_ok++;
	enum MHD_Result r = api_send(a, c, 200, "text/plain; version=0.0.4", b ? b : "", n);
	free(b);
	return r;
}

/* ----------------------------------------------------------------- the daemon */

static bool api_authorized(shoal_api *a, struct MHD_Connection *c)
{
	if (!a->key)
		return true;
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncmp(h, "Bearer ", 7))
		return false;
	const char *k = h + 7;
	size_t n = strlen(a->key);
	/* same time whatever the first difference */
	unsigned char d = strlen(k) != n;
	for (size_t i = 0; i < n && k[i]; i++)
		d |= (unsigned char)(k[i] ^ a->key[i]);
	return !d;
}

static enum MHD_Result api_access(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	(void)version;
	shoal_api *a = cls;
	api_conn *k = *con_cls;
	if (!k) {
		k = calloc(1, sizeof *k);
		if (!k)
			return MHD_NO;
		k->a = a;
		*con_cls = k;
		api__guard_set(a->guard, c, API__GUARD_BODY); /* the headers are in */
		return MHD_YES;
	}
	if (*upload_size) {
		if (k->len + *upload_size > a->cfg.max_body) {
			k->too_big = true;
		} else {
			char *b = realloc(k->body, k->len + *upload_size + 1);
			if (!b)
				return MHD_NO;
			memcpy(b + k->len, upload, *upload_size);
			k->body = b;
			k->len += *upload_size;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	api__guard_set(a->guard, c, API__GUARD_SERVE); /* the request is in */
	bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
	if (!strcmp(url, "/") && get) { /* the page asks for the key itself */
		a->req_ok++;
		return api_send(a, c, 200, "text/html; charset=utf-8", shoal_api_dashboard,
		                strlen(shoal_api_dashboard));
	}
	if (!strcmp(method, "OPTIONS") && a->cors) /* preflights carry no key */
		return api_preflight(a, c);
	if (!strcmp(url, "/health") && get) {
		a->req_ok++;
		return api_send(a, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
	}
	if (!api_authorized(a, c))
		return api_fail(a, c, 401, NULL, "invalid_api_key",
		                "a valid API key is needed (Authorization: Bearer KEY)");
	if (k->too_big)
		return api_fail(a, c, 413, NULL, NULL, "the body is larger than %zu bytes",
		                a->cfg.max_body);
	if (!strcmp(url, "/v1/models") && get)
		return api_models(a, c);
	if (!strncmp(url, "/v1/models/", 11) && url[11] && get)
		return api_model_get(a, c, url + 11);
	if (!strcmp(url, "/v1/cluster") && get)
		return api_cluster(a, c);
	if (!strcmp(url, "/metrics") && get)
		return api_metrics(a, c);
	if (!strcmp(url, "/v1/chat/completions") && post)
		return api_complete(a, c, k, true);
	if (!strcmp(url, "/v1/completions") && post)
		return api_complete(a, c, k, false);
	bool known = !strcmp(url, "/v1/models") || !strcmp(url, "/v1/cluster") ||
	             !strcmp(url, "/metrics") || !strcmp(url, "/v1/chat/completions") ||
	             !strcmp(url, "/v1/completions");
	if (known)
		return api_fail(a, c, 405, NULL, NULL, "%s does not take %s", url, method);
	return api_fail(a, c, 404, NULL, NULL, "no such route: %s %s", method, url);
}

/* The connection's request is over (done, or the client went away). */
static void api_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
	shoal_api *a = cls;
	api_conn *k = *con_cls;
	if (!k)
		return;
	api__guard_set(a->guard, c, API__GUARD_HEAD); /* kept alive: the next request's deadline */
	if (k->counted)
		a->streams--;
	if (k->run) {
		pthread_mutex_lock(&k->run->mu);
		bool done = k->run->done;
		a->tokens += k->run->n_tok;
		pthread_mutex_unlock(&k->run->mu);
		if (k->submitted && !done && !k->finished) {
			/* the client went away mid-run: its session is freed now */
			a->ops.cancel(a->ops.ctx, k->handle);
			a->req_cancelled++;
		} else if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && k->submitted &&
		           !k->end_sent && k->q.stream) {
			a->req_cancelled++;
		}
		run_unref(k->run);
	}
	shoal_api_req_fini(&k->q);
	if (k->parsed)
		shoal_tool_parsed_fini(&k->tp);
	free(k->body);
	free(k->out);
	free(k);
	*con_cls = NULL;
}

shoal_err shoal_api_start(const shoal_api_config *cfg, const shoal_api_ops *ops, shoal_api **out,
                          char *why, size_t why_len)
{
	*out = NULL;
	shoal_api *a = calloc(1, sizeof *a);
	if (!a)
		return SHOAL_ERR_NOMEM;
	a->cfg = *cfg;
	a->ops = *ops;
	a->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
	a->key = cfg->key ? strdup(cfg->key) : NULL;
	a->cors = cfg->cors ? strdup(cfg->cors) : NULL;
	snprintf(a->model, sizeof a->model, "%s", cfg->model ? cfg->model : "");
	if (pthread_mutex_init(&a->model_mu, NULL) != 0) {
		free(a);
		return SHOAL_ERR_NOMEM;
	}
	if (!a->cfg.max_body)
		a->cfg.max_body = 1u << 20;
	if (!a->cfg.max_conns) /* above the node's queue: a full queue answers 429 */
		a->cfg.max_conns = 128;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
	if (!a->host || (cfg->key && !a->key) || (cfg->cors && !a->cors)) {
		shoal_api_stop(a);
		return SHOAL_ERR_NOMEM;
	}
	if (inet_pton(AF_INET, a->host, &sa.sin_addr) != 1) {
		shoal_api_stop(a);
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "API address %s is not IPv4",
		                 cfg->host);
	}
	shoal_err ge = api__guard_new(a->cfg.max_conns, &a->guard, why, why_len);
	if (ge) {
		shoal_api_stop(a);
		return ge;
	}
	/* no MHD_USE_ERROR_LOG: a client that goes away mid-stream is normal.
	 * Slow clients: at most API_PER_IP_CONNS connections an address, and
	 * the guard's deadlines and room (api_guard.c); the idle timeout
	 * covers a reply nobody reads. */
	a->d = MHD_start_daemon(
	    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
	    api_access, a, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT, a->cfg.max_conns,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, API_PER_IP_CONNS(a->cfg.max_conns),
	    MHD_OPTION_NOTIFY_COMPLETED, api_completed, a, MHD_OPTION_NOTIFY_CONNECTION,
	    api__guard_notify, a->guard, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)120,
	    MHD_OPTION_END);
	if (!a->d) {
		int e = errno;
		shoal_api_stop(a);
		return shoal_why(
		    why, why_len, SHOAL_ERR_IO, "cannot listen for the API on %s:%u: %s",
		    cfg->host ? cfg->host : "127.0.0.1", (unsigned)cfg->port, strerror(e));
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_BIND_PORT);
	a->port = info ? info->port : cfg->port;
	SHOAL_LOG_I(LOG_PART, "OpenAI-compatible API on http://%s:%u/v1 (model '%s')%s", a->host,
	            (unsigned)a->port, a->model[0] ? a->model : "not known yet",
	            a->key ? ", API key required" : "");
	*out = a;
	return SHOAL_OK;
}

void shoal_api_stop(shoal_api *a)
{
	if (!a)
		return;
	a->stopping = 1;
	/* streams in flight end with an error event first: each notices
	 * within a keepalive period (API_KEEPALIVE_MS); wait up to twice that */
	for (int i = 0; a->d && a->streams > 0 && i < 2 * API_KEEPALIVE_MS / 10; i++)
		nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
	if (a->d)
		MHD_stop_daemon(a->d);
	api__guard_free(a->guard); /* after the daemon: its connections are closed */
	free(a->host);
	free(a->key);
	free(a->cors);
	pthread_mutex_destroy(&a->model_mu);
	free(a);
}

void shoal_api_set_model(shoal_api *a, const char *model)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->model_mu);
	snprintf(a->model, sizeof a->model, "%s", model ? model : "");
	pthread_mutex_unlock(&a->model_mu);
	SHOAL_LOG_I(LOG_PART, "the API serves model '%s'", model ? model : "");
}

uint16_t shoal_api_port(const shoal_api *a)
{
	return a ? a->port : 0;
}
