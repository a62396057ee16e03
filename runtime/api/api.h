/*
 * runtime/api/api.h: the OpenAI-compatible HTTP API of a peer (libmicrohttpd,
 * jansson): /v1/models, /v1/chat/completions and /v1/completions (whole or
 * streamed as server-sent events), /v1/cluster, /metrics, /health.
 *
 * Part: runtime/, room api/. It knows nothing of the node: whoever starts it
 * (runtime/node/, whose run slots fill it: serve_clients.c) hands it an
 * ops table that builds prompts, submits runs and reports the cluster, and
 * the runs report back through a sink. Threads: libmicrohttpd runs a
 * thread per connection (at most cfg.max_conns); ops are called on those
 * threads and must be thread-safe; sinks are called on the serving node's
 * data thread, which computes the pipeline: they must not block.
 */
#ifndef SHOAL_RUNTIME_API_H
#define SHOAL_RUNTIME_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "models/chat.h"

#define SHOAL_API_DEFAULT_PORT 47480
#define SHOAL_API_MAX_TOP      20  /* top_logprobs at most, as OpenAI */
#define SHOAL_API_MAX_BIAS     128 /* logit_bias entries (the sampler's limit) */
/* Choices one request may ask for (n), each a run of its own: 16 is the
 * most KV sessions a stage holds (`shoal node --sessions`, at most 16), so
 * on a cluster started with --sessions n or more all n run batched; the
 * others wait in the owner's queue (64 runs), a quarter of which one
 * request takes at most. */
#define SHOAL_API_MAX_N 16

/* Where a run's tokens and end go (on the node's data thread: never block). */
typedef struct shoal_api_sink {
	/* One token: its id, its text (the detokenizer's piece, may be
	 * empty while a character is incomplete), logprob, top alternatives. */
	void (*on_token)(void *ctx, int32_t id, const char *text, size_t len, float logprob,
	                 uint32_t n_top, const int32_t *top_ids, const float *top_lps);
	/* The end: err SHOAL_OK with the detokenizer's tail, or the error and
	 * why. Called once; ctx may be freed after. */
	void (*on_end)(void *ctx, shoal_err err, const char *why, const char *tail,
	               size_t tail_len);
	/* Before the first token: how many prompt tokens the stages' prefix
	 * cache held (usage.prompt_tokens_details.cached_tokens). May be NULL. */
	void (*on_cached)(void *ctx, uint32_t cached);
	void *ctx;
} shoal_api_sink;

/* The sampling of one request. */
typedef struct shoal_api_gen {
	uint32_t max_tokens;
	uint32_t logprobs; /* top alternatives per token, 0..SHOAL_API_MAX_TOP */
	bool logprob;      /* the request shows logprobs (else they are not computed) */
	float temp, top_p;
	uint64_t seed;             /* the request's, or a fresh random one (shown to the client) */
	bool special;              /* the text shows control tokens (a tool syntax uses them) */
	float presence, frequency; /* OpenAI's penalties, [-2, 2] */
	uint32_t n_bias;           /* logit_bias: token ids and their biases */
	int32_t bias_id[SHOAL_API_MAX_BIAS];
	float bias[SHOAL_API_MAX_BIAS];
	/* structured output: a grammar program (models/grammar.h) the reply
	 * must follow (response_format, or tool_choice required/named), owned
	 * by the request; submit copies it. NULL: none. */
	uint32_t *grammar;
	uint32_t n_grammar;
	/* "speculate" (an extension, README "API"): the drafter of the
	 * request's runs, SHOAL_API_SPEC_*; the node refuses a kind it does
	 * not offer (INVAL: a 400). */
	uint8_t speculate;
} shoal_api_gen;

/* The "speculate" values, in the order of --speculate's kinds
 * (runtime/engine/draft_kinds.h) after NODE (absent or null: the node's
 * --speculate). */
enum {
	SHOAL_API_SPEC_NODE = 0,
	SHOAL_API_SPEC_OFF,
	SHOAL_API_SPEC_AUTO,
	SHOAL_API_SPEC_LOOKUP,
	SHOAL_API_SPEC_DRAFT,
	SHOAL_API_SPEC_MTP,
};

/* What the API shows of the node's work, for /metrics. */
typedef struct shoal_api_gauges {
	uint32_t queued, running; /* requests */
	uint32_t queued_paused;   /* of the queued: paused by a plan change */
	/* the longest wait of a queued request now; the waits of the requests
	 * started so far (sum, count, longest) */
	uint64_t queue_oldest_us, wait_sum_us, wait_n, wait_max_us;
	uint64_t stage_runs, stage_batched_runs, stage_rows, hidden_frames, hidden_bytes,
	    token_frames, stage_last_run_ns;
	/* this peer's stage's prefix cache (runtime/dist/dist.h) */
	uint64_t prefix_hits, prefix_hit_tokens, prefix_evictions, prefix_entries, prefix_tokens,
	    prefix_bytes;
	/* speculation of the sessions this peer owns: ids drafted, kept */
	uint64_t spec_drafted, spec_accepted;
	/* the plan's predicted time per token and this peer's stage's, beside
	 * the medians of recent decode steps (0: none; runtime/node/timing.h) */
	uint64_t pred_step_ns, step_ns, stage_pred_ns, stage_run_ns;
} shoal_api_gauges;

typedef struct shoal_api_ops {
	/* The token ids of a chat (msgs[n], text NULL; tools: the functions
	 * the model may call, a JSON array, or NULL) or a plain prompt (text). */
	shoal_err (*prompt)(void *ctx, const shoal_chat_msg *msgs, size_t n, const char *tools,
	                    const char *text, int32_t **ids, size_t *n_ids, char *why,
	                    size_t why_len);
	/* Queue a run of ids[n] (borrowed): one per choice of a request,
	 * each a session of its own. *handle names it for cancel.
	 * BUSY: the queue is full. The sink gets its tokens and end. */
	shoal_err (*submit)(void *ctx, const int32_t *ids, size_t n, const shoal_api_gen *g,
	                    const shoal_api_sink *sink, uint32_t *handle, char *why,
	                    size_t why_len);
	/* The client went away: end the run now (its sink still gets on_end). */
	void (*cancel)(void *ctx, uint32_t handle);
	/* A token's text (for logprobs), into buf; returns its length. */
	size_t (*token_text)(void *ctx, int32_t id, char *buf, size_t cap);
	/* The status JSON of `shoal status --json`, malloc'd (NULL: none yet). */
	char *(*cluster_json)(void *ctx);
	void (*gauges)(void *ctx, shoal_api_gauges *g);
	/* The context a run's prompt and tokens share, in tokens (0: not
	 * known yet). May be NULL. A run that ends with prompt + tokens at
	 * this size was cut by it: finish_reason "length". */
	uint32_t (*context)(void *ctx);
	/* The model's chat format (its tool-call syntax); may be NULL
	 * (SHOAL_CHAT_PLAIN). SHOAL_ERR_STATE: no model yet. */
	shoal_err (*chat_style)(void *ctx, shoal_chat_style *out);
	void *ctx;
} shoal_api_ops;

typedef struct shoal_api_config {
	const char *host;   /* IPv4 address to bind; NULL: 127.0.0.1 */
	uint16_t port;      /* 0: any */
	const char *key;    /* Bearer key the requests must carry; NULL: none */
	const char *model;  /* the model's name for /v1/models and replies; NULL:
	                       not known yet (any name is taken) */
	size_t max_body;    /* bytes; 0: 1 MiB */
	unsigned max_conns; /* 0: 128 */
	const char *cors;   /* --api-cors ORIGIN: the origin (or "*") a browser
	                       may call from; NULL: no CORS headers */
} shoal_api_config;

typedef struct shoal_api shoal_api;

/* Listen and serve (strings copied). ops is borrowed for the API's life. */
shoal_err shoal_api_start(const shoal_api_config *cfg, const shoal_api_ops *ops, shoal_api **out,
                          char *why, size_t why_len);
void shoal_api_stop(shoal_api *a); /* NULL is a no-op; waits for the connections */
uint16_t shoal_api_port(const shoal_api *a);
/* Name the model once it is known (thread-safe; copied). */
void shoal_api_set_model(shoal_api *a, const char *model);

#endif
