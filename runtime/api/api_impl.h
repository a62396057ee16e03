/*
 * runtime/api/api_impl.h: what the API's files share. The files, by job,
 * in the order a completion request meets them:
 *   api.c          the daemon: routes, the key, a connection's end
 *   api_http.c     replies: headers, JSON, OpenAI's errors
 *   api_routes.c   the routes that are not completions (/v1/models,
 *                  /v1/cluster, /metrics, CORS preflights)
 *   api_req.c      a completion request's body, parsed and checked
 *   api_complete.c a completion: the prompt, a run per choice, the whole
 *                  reply, the wait
 *   api_stream.c   the same reply as server-sent events
 *   api_choice.c   one choice: its visible text (stop strings), its
 *                  calls, its finish reason, its logprobs
 *   api_run.c      the runs' sink side: what the node's data thread fills
 *   api_tools.c    the replies' function calls
 *   api_guard.c    slow clients
 *
 * Part: runtime/, room api/.
 */
#ifndef SHOAL_RUNTIME_API_IMPL_H
#define SHOAL_RUNTIME_API_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "models/reply.h"
#include "models/tool_call.h"
#include "runtime/api/api_guard.h"
#include "runtime/api/api_req.h"

/* A streamed call's arguments go out in pieces of this many bytes (OpenAI
 * streams them a token or so at a time; clients join the pieces). */
#define API_ARGS_PIECE 16
/* A stream with nothing to say for this long sends an SSE comment: a
 * client that went away is noticed on the write (and its runs ended). */
#define API_KEEPALIVE_MS 1000

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

/* ------------------------------------------------------ replies (api_http.c) */

/* The model's name now, into out[cap] ("" when not known yet). */
void api__model(shoal_api *a, char *out, size_t cap);
/* The headers every reply carries (CORS when --api-cors names an origin). */
void api__headers(const shoal_api *a, struct MHD_Response *r);
/* A reply of body[len] (copied); seed: the X-Shoal-Seed header (NULL: none). */
enum MHD_Result api__reply(shoal_api *a, struct MHD_Connection *c, unsigned status,
                           const char *type, const char *body, size_t len, const char *seed);
enum MHD_Result api__send(shoal_api *a, struct MHD_Connection *c, unsigned status, const char *type,
                          const char *body, size_t len);
/* j as the reply's body (the reference is taken). */
enum MHD_Result api__send_json(shoal_api *a, struct MHD_Connection *c, unsigned status, json_t *j);
/* OpenAI's error shape: {"error": {message, type, param, code}}. */
json_t *api__error_json(const char *type, const char *msg, const char *param, const char *code);
/* An error reply, counted in /metrics by its class. */
enum MHD_Result api__fail(shoal_api *a, struct MHD_Connection *c, unsigned status,
                          const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The client of a request we are still answering closed its end. */
bool api__client_gone(struct MHD_Connection *c);
/* The HTTP status of a run's error (429 busy, 503 no plan, ...). */
unsigned api__status_of(shoal_err e);

/* -------------------------------------------------- the routes (api_routes.c) */

enum MHD_Result api__models(shoal_api *a, struct MHD_Connection *c);
enum MHD_Result api__model_get(shoal_api *a, struct MHD_Connection *c, const char *id);
enum MHD_Result api__preflight(shoal_api *a, struct MHD_Connection *c);
enum MHD_Result api__cluster(shoal_api *a, struct MHD_Connection *c);
enum MHD_Result api__metrics(shoal_api *a, struct MHD_Connection *c);

/* --------------------------------------------------- runs, sink side (api_run.c) */

typedef struct api__tok {
	int32_t id;
	float lp;
	uint32_t n_top;
	int32_t top_ids[SHOAL_API_MAX_TOP];
	float top_lps[SHOAL_API_MAX_TOP];
	size_t off, len; /* its text in run.text */
} api__tok;

typedef struct api__runs api__runs;

/* One choice's run as its sink fills it (under the set's mu). */
typedef struct api__run {
	api__runs *set;
	char *text;
	size_t len, cap;
	api__tok *toks;
	size_t n_tok, cap_tok;
	uint32_t cached; /* prompt tokens the prefix cache held */
	bool done;
	shoal_err err;
	char why[SHOAL_WHY_LEN];
	/* test hook (api__test_reply): the text shown in place of the
	 * model's, a piece per token, the rest at the end */
	const char *forced;
	size_t forced_off;
} api__run;

/* The runs of one request's choices: one lock and one condition for all,
 * so that the connection's thread waits for whichever moves first. Shared
 * by the connection and each run in flight (refs); the last one frees. */
struct api__runs {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;
	/* a whole reply with no stop strings: its waiter needs each run's
	 * first token and end only (not a wake-up per token: with 8 such
	 * requests those were ~10% of a peer's time) */
	bool quiet;
	uint32_t n;
	api__run run[]; /* [n] */
};

/* n runs (refs 1: the caller's), each showing forced (may be NULL). */
api__runs *api__runs_new(uint32_t n, bool quiet, const char *forced);
/* Take a reference for run i's sink and return the sink (before submit). */
shoal_api_sink api__runs_sink(api__runs *s, uint32_t i);
/* Drop a reference that no sink will drop (a submit that failed). */
void api__runs_unref(api__runs *s);
/* Wait on the set's condition, under its mu, for at most ms. */
void api__runs_wait(api__runs *s, unsigned ms);

/* ---------------------------------------------------- a request in flight */

/* One choice, the connection's side: its run and what was made of it. */
typedef struct api__choice {
	api__run *run; /* in the connection's runs */
	uint32_t handle;
	bool submitted, finished; /* finished: the run ended or was cancelled by us */
	bool stopped;             /* cut at a stop string */
	/* function calls: the reply's text read as calls once the run ended,
	 * how many it has; call ids are "call_<base>_<i>" */
	shoal_tool_parsed tp;
	bool parsed;
	size_t n_calls;
	char base[40];
	/* the reply read as reasoning and answer (models/reply.h): the
	 * answer is what content, calls and stop strings see */
	shoal_reply rp;
	/* streaming: what was sent, what the run held at the last step (its
	 * text may be held back), whether its finish chunk went out */
	size_t sent_tok, sent_text, sent_reason;
	size_t seen_tok, seen_text;
	bool role_sent, end_sent;
	size_t n_out; /* tokens the client got (usage), once it ended */
} api__choice;

/* Per connection. */
typedef struct api__conn {
	char *body;
	size_t len;
	bool too_big;
	/* a completion in progress */
	shoal_api *a;
	struct MHD_Connection *conn; /* set with the runs */
	api__runs *runs;             /* NULL until the runs are made */
	api__choice *ch;             /* [q.n] */
	bool counted;                /* an SSE response counted in a->streams */
	shoal_api_req q;
	char id[40];
	char model[256]; /* the API's model name when the request came */
	char seed[24];   /* the request's seed in decimal: X-Shoal-Seed */
	char fingerprint[32];
	uint32_t ctx; /* the context size when the request came (0: unknown) */
	/* the model's tool syntax (NONE: tools not offered) */
	shoal_chat_tools syn;
	shoal_reply_form form; /* chat: how the reply's reasoning shows */
	long long created;
	/* streaming: the events not yet read by libmicrohttpd; end_sent: the
	 * stream's last event ([DONE]) is queued */
	bool end_sent;
	char *out;
	size_t out_len, out_off, out_cap;
} api__conn;

/* ---------------------------------------------- completions (api_complete.c) */

/* POST /v1/chat/completions (chat) or /v1/completions on connection k. */
enum MHD_Result api__complete(shoal_api *a, struct MHD_Connection *c, api__conn *k, bool chat);
/* The request on k is over (toe: how): cancel the runs still going, count
 * them, free what the request held (k itself stays). */
void api__conn_end(shoal_api *a, api__conn *k, enum MHD_RequestTerminationCode toe);

/* ----------------------------------------------------- streams (api_stream.c) */

/* The streamed reply of k (its runs going): a response to queue. */
struct MHD_Response *api__stream_response(api__conn *k);

/* ---------------------------------------------------- one choice (api_choice.c) */

/* Where the text choice c's client may see ends: before a stop string
 * (found: *hit set), or, while the run goes on, before a tail that could
 * still become one. Under the runs' mu. */
size_t api__visible_end(const api__conn *k, const api__choice *c, bool *hit);
/* Tokens whose text starts before `end`: the ones the client gets. */
size_t api__toks_before(const api__run *r, size_t end);
/* Read the choice's text[0..end) as reasoning and answer into c->rp
 * (final: the run is over or cut there). False when out of memory. */
bool api__reply_read(const api__conn *k, api__choice *c, size_t end, bool final);
/* Read the answer (c->rp.content) as function calls, once, when it is
 * final; then the offset in the answer where its content ends. Under the
 * runs' mu. */
size_t api__parse_calls(const api__conn *k, api__choice *c);
/* Why a tool_choice that wants a call is not met by choice c (false),
 * after api__parse_calls. */
bool api__calls_ok(const api__conn *k, const api__choice *c, char *why, size_t why_len);
/* "stop", "length" or "tool_calls". */
const char *api__finish_reason(const api__conn *k, const api__choice *c);
/* Logprobs of choice c's tokens [t0, t1): chat's {"content": [...]} or
 * the completions' {"tokens", "token_logprobs", ...}. */
json_t *api__logprobs(const api__conn *k, const api__choice *c, size_t t0, size_t t1);
/* The whole reply's choices[i] of a finished run (under the runs' mu);
 * sets c->n_out. */
json_t *api__choice_json(const api__conn *k, api__choice *c, uint32_t i);
/* usage: prompt tokens once, the completion tokens of every choice. */
json_t *api__usage_json(const api__conn *k);
/* End every run of k that still goes (a choice failed, or its client
 * went away); each run's sink still gets its end. Under the runs' mu. */
void api__choices_cancel(api__conn *k);

/* ------------------------------------------------- function calls (api_tools.c) */

/* The tool_calls array of a reply's message: calls p->calls[0..n), each
 * {"id", "type": "function", "function": {"name", "arguments"}}; ids are
 * the model's own or "call_<base>_<i>". */
json_t *api__tool_calls_json(const shoal_tool_parsed *p, size_t n, const char *base);

/* The same as the "delta" objects of a stream, in order: per call its id,
 * type and name with empty arguments, then the arguments in pieces. A new
 * reference to an array. */
json_t *api__tool_deltas(const shoal_tool_parsed *p, size_t n, const char *base);

/* How many of the parsed calls the reply carries (parallel_tool_calls
 * false: one), or 0 for none. Why a tool_choice that asks for a call is
 * not met, into why[] (false), or true. */
size_t api__tool_count(const shoal_api_req *q, const shoal_tool_parsed *p);
bool api__tool_choice_met(const shoal_api_req *q, const shoal_tool_parsed *p, char *why,
                          size_t why_len);

/* Test hook (./configure --enable-test-hooks): the text that
 * SHOAL_TEST_REPLY puts in place of the model's words for any chat
 * request, or SHOAL_TEST_TOOL_REPLY for a request that offers tools and
 * does not end with a tool result; NULL: none (and always NULL without the
 * hooks). The bundled models, trained on novels, never call a function
 * nor reason aloud: the tests of the round trip and of reasoning need
 * one. */
const char *api__test_reply(const shoal_api_req *q);

#endif
