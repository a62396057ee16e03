/*
 * runtime/node/serve.h: the serving state of a node that serves a model
 * (`shoal node --model FILE` or `--model-id`): from the gossiped view and
 * the local model to a plan, this peer's part of it, plan readiness, and
 * the data plane that runs requests through the plan.
 *
 * Part: runtime/node. The node thread calls everything here unless a
 * prototype says otherwise; the data thread (serve_data.c) owns the links,
 * the stage and the session owner. serve_impl.h lists the files by job.
 *
 * Readiness protocol (DESIGN.md sections 2 and 4):
 *  1. Every peer plans from the alive, compatible members that serve the
 *     same model id (others are listed in status with the reason).
 *  2. On a new plan digest D a peer builds the stage (and expert server)
 *     of its assignment from its own mapped file, then publishes "ready for
 *     D" (record ready_digest/ready_epoch) at once.
 *  3. The plan is servable when every peer it names publishes D; only then
 *     does the peer start sessions, and only over links whose admission
 *     token names D: a frame of another plan is dropped by the link.
 *  4. A request that finds no servable plan waits (bounded), then fails
 *     with the reason; it is never computed with another plan's weights.
 *  5. The previous plan (stability) is passed to the scheduler only when
 *     every candidate is ready for it or for the plan it yields (or, not in
 *     it, announced nothing); a joiner learns it by recomputing its peers'
 *     plan from their view. Otherwise everyone plans from scratch, so peers
 *     always converge on one digest. Load and links stay out of the view
 *     (each peer would bucket them from its own history).
 *
 * RUN_* messages: typed msgpack fields, encoded and checked by
 * net/runmsg.h. The owner answers every RUN_REQ with RUN_TOKENs and one
 * RUN_END carrying a shoal_err code, a retry flag (set when the plan
 * changed under the run, or the peer is busy) and the reason; clients
 * decide on the code and the flag, never on the text.
 */
#ifndef SHOAL_RUNTIME_SERVE_H
#define SHOAL_RUNTIME_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/peer_id.h"
#include "net/ctl.h"
#include "net/key.h"
#include "net/record.h"
#include "net/swim.h"
#include "net/xfer.h"
#include "runtime/api/api.h"
#include "runtime/engine/draft_kinds.h"

typedef struct shoal_serve shoal_serve;

/* How long a node's data thread spins for a frame before it blocks, in us,
 * unless --spin-us says otherwise (serve_impl.h has the rest of the
 * rule). tests/bench/dist_bench.sh measures it. */
#define SHOAL_SERVE_HOP_SPIN_US 2000u

typedef struct shoal_serve_config {
	const char *model_path; /* required unless wcache */
	/* The model is this weights cache (models/wcache.h), owned by the
	 * cluster from the call on (also when it fails): its digests are the
	 * model id, and the tensors of each assignment are fetched from the
	 * peers before readiness is announced. NULL: model_path, whole. */
	struct shoal_wcache *wcache;
	uint64_t cache_max;    /* bytes the weights cache may hold (wcache only) */
	const char *state_dir; /* model id cache; NULL: none */
	uint64_t mem_limit;    /* bytes offered at most; 0: what is available */
	uint32_t ctx;          /* KV context per session; 0: the model's, at most 4096 */
	uint32_t sessions;     /* KV sessions per stage, 1..SHOAL_SERVE_MAX_SESSIONS; 0: 2 */
	bool spread_experts;
	bool tensor_groups;  /* policy.tensor_groups: the same on every peer */
	uint32_t link_us;    /* link latency plans assume; 0: SHOAL_SERVE_LINK_US */
	uint32_t threads;    /* engine threads; 0: 1 */
	const char *backend; /* the stages' backend kind (runtime/backends.h);
	                        NULL: "auto". Borrowed: outlives the cluster */
	/* The prefix cache: bytes of ended sessions' KV a stage keeps (dist.h
	 * "The prefix cache"); 0: off, UINT64_MAX: its idle session slots. */
	uint64_t prefix_bytes;
	uint32_t hop_spin_us; /* the data thread's spin before a wait; 0: none
	                         (a node's default: SHOAL_SERVE_HOP_SPIN_US) */
	/* Speculation for the runs this peer owns (runtime/dist/dist.h
	 * "Speculation"): a drafter of this kind per run (OFF: none), ids
	 * per step at most (0: the default). */
	shoal_speculate_kind speculate;
	uint32_t draft_max;
	/* --draft: a draft model (a GGUF with the target's vocabulary, checked
	 * here: a mismatch fails the call) that the data thread runs for the
	 * runs of kind DRAFT, and of AUTO; NULL: none (borrowed: outlives the
	 * cluster) */
	const char *draft_path;
	uint8_t self[SHOAL_PEER_ID_LEN];
	const shoal_key *key;      /* admission tokens; NULL: insecure (zero key) */
	const char *data_host;     /* IPv4 address the data listener binds (copied) */
	uint16_t data_port;        /* 0: any */
	uint32_t base_ms;          /* the node's base period */
	shoal_xfer_rdma_opts rdma; /* the data links' RDMA choices (rdma.device borrowed) */
	/* Replies to RUN_REQ, called on the node thread (shoal_serve_drain). */
	shoal_err (*reply)(void *ud, const shoal_ctl_route *to, const void *buf, size_t len);
	/* A data link to peer `id` (at incarnation `inc` in our view) broke
	 * without a goodbye: evidence that it died (node thread; optional). */
	void (*peer_gone)(void *ud, const uint8_t id[SHOAL_PEER_ID_LEN], uint64_t inc,
	                  const char *why);
	void *ud;
} shoal_serve_config;

/* Open and map the model, compute (or load the cached) model id, build the
 * manifest and the tokenizer, start the data thread with its listener.
 * *out is the caller's (shoal_serve_free). */
shoal_err shoal_serve_new(const shoal_serve_config *cfg, shoal_serve **out, char *why,
                          size_t why_len);
void shoal_serve_free(shoal_serve *cl); /* NULL is a no-op; joins the thread */

/* The data port actually bound. */
uint16_t shoal_serve_data_port(const shoal_serve *cl);

/* Fill our record's serving part: models[0] = this model, serving = 1,
 * mem_weights = the memory offered (min(available, --mem-limit), rounded
 * down to 1/64 of its power of two and kept while it moves less than 3 %,
 * so noise does not re-plan), ready digest and epoch. */
void shoal_serve_fill_record(shoal_serve *cl, shoal_record *r, uint64_t mem_available);

/* Plan from the view v[n] (shoal_swim_view order): when the view's planning
 * inputs changed, run the scheduler; on a new digest build the local stage
 * and announce readiness; update servability. Returns 1 when the record
 * must be republished (readiness changed), else 0. */
int shoal_serve_update(shoal_serve *cl, const shoal_swim_member *v, size_t n);

/* The "plan" object of `shoal status --json` (new reference, or NULL):
 *   {"model_id", "servable", "digest" | null, "epoch", "why" (no plan / not
 *    servable), "ready": [ids], "not_ready": [ids], "left_out":
 *    [{"peer", "name", "why"}], "links": [{"peer", "transport"}],
 *    "weights": {"source": "file" | "cache", "cache_hit_bytes", "fetch":
 *    progress (runtime/node/weights.h) | null},
 *    and the fields of shoal_plan_to_json (stages, experts, memory, ...)} */
json_t *shoal_serve_status_json(shoal_serve *cl);

/* Whether this peer's stage's decode runs have been off the plan's
 * prediction by a large factor for long (runtime/node/timing.h's gap
 * rule) under the current plan, not asked before under it: then true once,
 * with *ratio measured / predicted. Node thread. */
bool shoal_serve_take_gap(shoal_serve *cl, double *ratio);

/* A RUN_REQ message from a client, buf[len] whole (net/runmsg.h). Answers
 * (RUN_TOKEN, RUN_END) go out through cfg.reply with its seq; a malformed
 * request gets a RUN_END with the decoder's error and reason. */
void shoal_serve_run_request(shoal_serve *cl, const shoal_ctl_route *from, const uint8_t *buf,
                             size_t len);

/* The client connection `fd` (shoal_ctl_route.fd) closed: its runs end at
 * once, queued or running, and their sessions are freed. */
void shoal_serve_client_gone(shoal_serve *cl, int fd);

/* The HTTP API's ops (runtime/api/api.h), served by the run slots here:
 * its runs' tokens go from the data thread straight into their sinks, so
 * a sink must not block (take the run's lock, copy, signal). The serving
 * state may come after the API starts (a peer without the model file
 * fetches its weights first), so the API reaches it through `a`, where
 * the node thread publishes it (shoal_serve_api_set); until then every op
 * answers 503 with the reason. The API's status JSON is the node's:
 * status(status_ctx), a new string (NULL: none yet; any thread). */
typedef struct shoal_serve_api {
	shoal_serve *serve; /* read and set atomically */
	char *(*status)(void *ctx);
	void *status_ctx;
} shoal_serve_api;

/* The ops over `a` (borrowed for the API's life) into *ops. */
void shoal_serve_api_ops(shoal_serve_api *a, shoal_api_ops *ops);
/* Publish the serving state the API's ops reach (node thread). */
void shoal_serve_api_set(shoal_serve_api *a, shoal_serve *cl);

/* Readable when the data thread has tokens or results for the node thread. */
int shoal_serve_event_fd(const shoal_serve *cl);
/* Send what the data thread produced (RUN_TOKEN / RUN_END replies). */
void shoal_serve_drain(shoal_serve *cl);

#endif
