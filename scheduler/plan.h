/*
 * scheduler/plan.h: the scheduler's entry point, plan = schedule(view,
 * manifest, policy, previous plan), the policy, the plan object with its
 * canonical encoding and digest, and the readiness tracker that says when a
 * plan may be served.
 *
 * Part: scheduler/ (pure: no clock, no randomness, no I/O, no globals;
 * integer arithmetic only, so every peer computes the same digest).
 * The cost model, the search and the stability rules are described in
 * scheduler/schedule.c; the canonical encoding below.
 */
#ifndef SHOAL_SCHEDULER_PLAN_H
#define SHOAL_SCHEDULER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "scheduler/digest.h"
#include "scheduler/manifest.h"
#include "scheduler/view.h"

typedef struct shoal_policy {
	uint32_t ctx;               /* tokens of context per session the KV cache
	                               is reserved for; also the context at which
	                               the time per token is predicted */
	uint32_t sessions;          /* sessions to reserve KV for (>= 1) */
	uint32_t headroom_permille; /* share of each peer's memory kept free */
	uint32_t gain_permille;     /* replace a feasible previous plan only if
	                               the predicted time drops by more */
	uint32_t near_permille;     /* plans within this of the fastest are
	                               near-equal: the fewest bytes moved wins */
	bool spread_experts;        /* place each MoE layer's experts on several
	                               peers, balanced by speed */
	bool tensor_groups;         /* also consider stages run by a tensor group
	                               (scheduler/tensor.c); off by default:
	                               --tensor of shoal plan and shoal node */
	bool tensor_prefer;         /* tests: a feasible plan with a tensor group
	                               wins over every pipeline plan (loopback
	                               runs of models too small to gain) */
	uint64_t epoch_floor;       /* a new plan's epoch is above this and above
	                               the previous plan's (the cluster's highest
	                               served epoch: epochs never recur) */
} shoal_policy;

/* Defaults (each derived in plan.c): ctx 8192, 1 session, headroom 5 %,
 * gain 10 %, near-equal 2 %, experts kept with their layer. */
void shoal_policy_init(shoal_policy *p);

/* Replicas of one hot expert at most (the owner and three copies). */
#define SHOAL_PLAN_MAX_OWNERS 4

typedef struct shoal_plan_peer {
	shoal_peer_id id;
	char name[64];
	uint64_t weight_bytes;   /* layers, experts, embedding, head it holds */
	uint64_t kv_bytes;       /* KV cache reserved for its layers */
	uint64_t capacity_bytes; /* its memory after headroom */
	uint32_t n_experts;      /* routed experts it holds (replicas count) */
	uint64_t gpu_bytes;      /* of weight + kv bytes, those on its GPU */
	uint64_t gpu_capacity;   /* its GPU's memory after headroom (0: none) */
	bool gpu_unified;        /* the GPU's memory is the host's */
	char gpu_backend[16];    /* the view's, for messages ("vulkan") */
} shoal_plan_peer;

typedef struct shoal_plan_stage {
	uint32_t peer;        /* index into the plan's peers */
	uint32_t first_layer; /* the stage runs layers [first_layer, end_layer) */
	uint32_t end_layer;
	/* layers [first_layer, gpu_end) run on the peer's GPU (with the
	 * routed experts of those layers it holds), [gpu_end, end_layer) in
	 * host memory on its CPU: a split inside the peer, a stage boundary
	 * without a hop. gpu_end == first_layer: all on the CPU. */
	uint32_t gpu_end;
	/* the predicted time of the stage's own work per token (its layers,
	 * experts, the head on the last stage; not the hop into it), ns. Not
	 * encoded: 0 in a decoded plan. */
	uint64_t predicted_ns;
} shoal_plan_stage;

/* A member of a stage's tensor group: a peer and its speed weight; its
 * share of each split dimension is shoal_plan_split of the weights. */
typedef struct shoal_plan_member {
	uint32_t peer;   /* index into the plan's peers */
	uint64_t weight; /* > 0; shares are proportional to it */
} shoal_plan_member;

/* FFN columns are split in blocks of 32 (two AVX-512 stores of F32): a
 * member's columns are whole blocks, the last block may be short. */
#define SHOAL_PLAN_TP_COLS 32

typedef struct shoal_plan shoal_plan;

/* Compute the plan. prev is the last plan that became servable (NULL at
 * start). On success *out is a new plan the caller owns: prev's assignment
 * and epoch when prev is still feasible and no plan beats it by more than
 * policy->gain_permille, else a new assignment with epoch prev+1 (1 without
 * prev). SHOAL_ERR_INFEASIBLE with a reason ("needs 412.0 GiB, the cluster
 * offers 380.0 GiB", sizes as base/fmt.h writes them) when nothing fits; SHOAL_ERR_INVAL/RANGE for
 * a manifest or view the scheduler cannot use. */
shoal_err shoal_schedule(const shoal_view *view, const shoal_manifest *m, const shoal_policy *pol,
                         const shoal_plan *prev, shoal_plan **out, char *why, size_t why_len);

/* shoal_schedule with the sessions chosen from memory, as a node does
 * without --sessions (a pure function of the view: every peer picks the
 * same): the most of 16, 8, 4 that gives no deeper pipeline and no slower
 * token (within 5 %) than SHOAL_SCHED_SESSIONS_DEFAULT; that default when
 * none does; 1 when even the default does not fit. pol->sessions is set to
 * the choice. */
#define SHOAL_SCHED_SESSIONS_DEFAULT 2u
shoal_err shoal_schedule_sessions(const shoal_view *view, const shoal_manifest *m,
                                  shoal_policy *pol, const shoal_plan *prev, shoal_plan **out,
                                  char *why, size_t why_len);

void shoal_plan_free(shoal_plan *p);             /* NULL is a no-op */
shoal_plan *shoal_plan_dup(const shoal_plan *p); /* NULL when out of memory */

uint64_t shoal_plan_epoch(const shoal_plan *p);
/* SHOAL_MANIFEST_MODEL_ID_BYTES: the manifest's */
const uint8_t *shoal_plan_model_id(const shoal_plan *p);
const uint8_t *shoal_plan_digest(const shoal_plan *p); /* SHOAL_DIGEST_BYTES */
uint64_t shoal_plan_predicted_ns(const shoal_plan *p); /* per generated token */
uint64_t shoal_plan_moved_bytes(const shoal_plan *p);  /* newly loaded vs prev (all, without) */
/* The same plan (digest) predicted anew from other figures: p takes
 * from's predicted times (the plan's and its stages'); true when they
 * changed, false (nothing taken) for another digest. */
bool shoal_plan_take_times(shoal_plan *p, const shoal_plan *from);
bool shoal_plan_kept(const shoal_plan *p);        /* prev's assignment kept */
const char *shoal_plan_name(const shoal_plan *p); /* the manifest's name */
uint32_t shoal_plan_n_layer(const shoal_plan *p);
size_t shoal_plan_n_peers(const shoal_plan *p); /* peers it names, id order */
/* The i-th peer (i < n_peers) and stage (i < n_stages); another i aborts. */
const shoal_plan_peer *shoal_plan_peer_at(const shoal_plan *p, size_t i);
size_t shoal_plan_n_stages(const shoal_plan *p);
const shoal_plan_stage *shoal_plan_stage_at(const shoal_plan *p, size_t i);
uint32_t shoal_plan_embd_peer(const shoal_plan *p); /* index into peers */
/* The peer that samples: the last stage's, or the lead (largest weight) of
 * a last-stage group, among whose members the head is split by vocab rows
 * in blocks of SHOAL_PLAN_TP_COLS (shoal_plan_split of their weights). */
uint32_t shoal_plan_head_peer(const shoal_plan *p);
/* Whether the head runs on the head peer's GPU (the last stage's layers
 * are all there and the head fits beside them), else on its CPU. */
bool shoal_plan_head_gpu(const shoal_plan *p);
/* Whether the head peer holds and runs DeepSeek's MTP layer (a peer of the
 * view offers mtp and the manifest has the layer: scheduler/view.h), and
 * the bytes it counts there for it (0 without; not encoded: 0 in a decoded
 * plan): its weights, its KV and the embedding it shares. */
bool shoal_plan_mtp(const shoal_plan *p);
uint64_t shoal_plan_mtp_bytes(const shoal_plan *p);
uint32_t shoal_plan_layer_n_expert(const shoal_plan *p, uint32_t layer); /* 0: dense */
/* Owners of (layer, expert) as peer indices into owners[SHOAL_PLAN_MAX_OWNERS],
 * ascending; returns how many (0 for a bad layer or expert). */
size_t shoal_plan_expert_owners(const shoal_plan *p, uint32_t layer, uint32_t expert,
                                uint32_t owners[SHOAL_PLAN_MAX_OWNERS]);

/* Members of stage i's tensor group (ascending peer index), at most max
 * written to out; returns how many it has (0: the stage is one peer).
 * stage < n_stages and out NULL only with max 0, else it aborts. */
size_t shoal_plan_stage_members(const shoal_plan *p, size_t stage, shoal_plan_member *out,
                                size_t max);
size_t shoal_plan_n_groups(const shoal_plan *p); /* stages that are groups */

/* Apportion `units` (KV heads, column blocks, experts) among n members by
 * weight w (largest remainder; ties to the lower member): member i gets
 * count[i] units starting at first[i], in member order. Every peer gets the
 * same split from the same weights. n >= 1, the sum of w > 0. */
void shoal_plan_split(const uint64_t *w, uint32_t n, uint32_t units, uint32_t *first,
                      uint32_t *count);

/* The canonical encoding, all integers little-endian, fixed width:
 *   "SHPL" magic (4 bytes), u32 version (1, or 2 when some stage or the
 *   head computes on a GPU), u64 epoch,
 *   the manifest's model_id (32 bytes), u64 model bytes (embedding + head +
 *   every layer's weights and experts: tells quantizations apart when the
 *   model id is zero, as from a spec), u32 n_layer,
 *   u32 n_peer, n_peer x { 16-byte id },                   (id order)
 *   u32 n_stage, n_stage x { u32 peer, u32 first, u32 end }, (pipeline order)
 *   u32 embd_peer, u32 head_peer,
 *   u32 n_moe_layer, for each MoE layer ascending:
 *     u32 layer, u32 n_expert, n_expert x { u32 n_owner, n_owner x u32 peer }
 *   and only when some stage is a tensor group (so that plans without groups
 *   keep their digest):
 *   u32 n_group, n_group x { u32 stage, u32 n_member,
 *                            n_member x { u32 peer, u64 weight } }
 *   version 2 always has that group section (n_group may be 0) and then
 *   n_stage x { u32 gpu_end }, u32 head_gpu (0 or 1): plans without a
 *   GPU keep version 1 and their digest;
 *   version 3 (the head peer holds the MTP layer) is version 2's layout,
 *   with or without a GPU, then u32 1: plans without it keep theirs
 * Peers are indices into the id-ordered table. Predicted times, memory
 * figures and names are not encoded: they describe the plan, they are not
 * the assignment, and a kept plan keeps its digest when they change.
 * The digest is BLAKE2b-256 of these bytes. *out is malloc'd; caller frees. */
shoal_err shoal_plan_encode(const shoal_plan *p, uint8_t **out, size_t *len);
/* The plan those bytes encode, checked (counts in range, stages covering
 * the layers in order, indices below n_peer, ids and owners ascending, no
 * trailing bytes): SHOAL_ERR_FORMAT with a reason otherwise. Its digest is
 * of buf; names and memory figures are empty (they are not encoded). Groups
 * are read back (stages ascending, 2+ members ascending, weights > 0, the
 * stage's peer among its members). */
shoal_err shoal_plan_decode(const uint8_t *buf, size_t len, shoal_plan **out, char *why,
                            size_t why_len);

/* ---- readiness ---------------------------------------------------------
 * Agreement: a plan is served only after every peer it names announced
 * "ready for digest D". The tracker keeps each peer's latest announcement
 * (a later one replaces an earlier one); runtime/node/serve_ready.c feeds it
 * from the peers' gossiped readiness. */
typedef struct shoal_ready shoal_ready;

shoal_ready *shoal_ready_new(void); /* NULL when out of memory */
void shoal_ready_free(shoal_ready *r);
shoal_err shoal_ready_announce(shoal_ready *r, const shoal_peer_id *peer,
                               const uint8_t digest[SHOAL_DIGEST_BYTES]);
void shoal_ready_forget(shoal_ready *r, const shoal_peer_id *peer); /* peer left */
/* True when every peer of the plan announced its digest. */
bool shoal_ready_servable(const shoal_ready *r, const shoal_plan *p);
/* How many of the plan's peers have not; their indices go into missing[max]
 * (NULL only with max 0, else it aborts). */
size_t shoal_ready_missing(const shoal_ready *r, const shoal_plan *p, uint32_t *missing,
                           size_t max);

#endif
