/*
 * scheduler/view.h: the cluster as the scheduler sees it: alive peers
 * sorted by their 128-bit id, their quantized capacities, the link matrix and
 * the routing statistics of MoE experts; plus the bucketing with hysteresis
 * that keeps measurement noise out of the view.
 *
 * Part: scheduler/ (pure). net/ fills a view from gossip, runtime/node/plan_json.c
 * from a cluster JSON file. The view keeps peers sorted by id whatever the
 * order they were added in, and keys links and routing counts by id and
 * (layer, expert), so that the order of the input never reaches the plan.
 * Units: bytes, bytes/s, FLOP/s, nanoseconds; integers only.
 */
#ifndef SHOAL_SCHEDULER_VIEW_H
#define SHOAL_SCHEDULER_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/peer_id.h" /* peers are named by shoal_peer_id */

typedef struct shoal_view_peer {
	shoal_peer_id id;
	char name[64];      /* NUL-terminated, for messages only (not planned on) */
	uint64_t mem_bytes; /* memory the peer gives to weights + KV cache */
	uint64_t mem_bw;    /* memory bandwidth, bytes/s (> 0) */
	uint64_t flops;     /* compute, FLOP/s (> 0) */
	uint32_t load_pct;  /* busy share 0..90 as bucketed (see below); the
	                       peer's bandwidth and compute count for
	                       (100 - load_pct) % of their value */
	/* Its GPU, when it has one the plan may use (gpu_mem 0: none; the
	 * fields above are then the whole peer). A stage on this peer puts its
	 * first layers on the GPU while they fit and the rest in host memory
	 * on the CPU (mem_bytes, mem_bw, flops above); scheduler/schedule.c. */
	uint64_t gpu_mem;   /* bytes the GPU gives to weights + KV cache */
	uint64_t gpu_bw;    /* its read bandwidth, bytes/s (> 0 with gpu_mem) */
	uint64_t gpu_flops; /* its multiply rate, FLOP/s (> 0 with gpu_mem) */
	bool gpu_unified;   /* its memory is the host's (a Mac, an APU): what
	                       the GPU holds counts in mem_bytes too */
	/* NUL-terminated, for messages only (not planned on): the backend kind
	 * that computes on the GPU ("vulkan") and the GPU's name */
	char gpu_backend[16];
	char gpu_name[64];
	/* Calibration (scheduler/schedule.c, "calibration"): the share of its
	 * figures a layer of the engine really gets, permille (0: 1000, the
	 * figures above are already what a layer gets; at most 1000), of the
	 * CPU's bandwidth and compute and of the GPU's; and the engine's fixed
	 * costs: hop_ns, what a stage on this peer pays per hop it takes in
	 * beyond the link (receiving, waking, dispatch), round_ns, what a
	 * tensor group's collective round costs it beyond the link. */
	uint32_t bw_eff_pm, fl_eff_pm, gpu_bw_eff_pm, gpu_fl_eff_pm;
	uint64_t hop_ns, round_ns;
	/* It offers DeepSeek's MTP layer to the sessions it owns (shoal node
	 * --speculate mtp): the head peer of a plan of a view with such a
	 * peer holds and runs that layer (the manifest's mtp_bytes), when
	 * the model has one. */
	bool mtp;
} shoal_view_peer;

typedef struct shoal_view shoal_view;

/* An empty view whose missing links default to (latency_ns, bw bytes/s).
 * Returns NULL when out of memory. The caller owns the view. */
shoal_view *shoal_view_new(uint64_t default_latency_ns, uint64_t default_bw);
void shoal_view_free(shoal_view *v); /* NULL is a no-op */

/* Add a peer (copied). A zero bandwidth or compute (of the CPU, or of a
 * GPU with memory), a load over 90 % or a duplicate id -> SHOAL_ERR_INVAL
 * with a reason. */
shoal_err shoal_view_add_peer(shoal_view *v, const shoal_view_peer *p, char *why, size_t why_len);
/* Remove the peer with this id; SHOAL_ERR_NOTFOUND if absent. Its links and
 * nothing else go with it. */
shoal_err shoal_view_remove_peer(shoal_view *v, const shoal_peer_id *id);

/* Set the symmetric link a <-> b. When a link is given more than once (both
 * directions, or twice) the pessimistic combination is kept: the largest
 * latency and the smallest bandwidth, so the result does not depend on the
 * order the links came in. Links may name peers not (yet) in the view. */
shoal_err shoal_view_set_link(shoal_view *v, const shoal_peer_id *a, const shoal_peer_id *b,
                              uint64_t latency_ns, uint64_t bw, char *why, size_t why_len);

/* Routing statistics: how many tokens were routed to (layer, expert) in the
 * recent window (gossiped sums). Unknown layers count as uniform. Setting a
 * count twice keeps the last value (a count is a state, not an event). */
shoal_err shoal_view_set_expert_count(shoal_view *v, uint32_t layer, uint32_t expert,
                                      uint64_t count);

size_t shoal_view_n_peers(const shoal_view *v);
/* The i-th peer in id order (0 <= i < n_peers, else it aborts); the pointer
 * lives until the next change of the view. */
const shoal_view_peer *shoal_view_peer_at(const shoal_view *v, size_t i);
/* Index of a peer in id order, or -1. */
long shoal_view_find(const shoal_view *v, const shoal_peer_id *id);
/* The link i <-> j by index (i, j < n_peers, i != j, else it aborts): the
 * set one, else the default. */
void shoal_view_link(const shoal_view *v, size_t i, size_t j, uint64_t *latency_ns, uint64_t *bw);
/* Links as set (not the defaults), in (a, b) id order with a < b;
 * i < n_links, else it aborts. */
size_t shoal_view_n_links(const shoal_view *v);
void shoal_view_link_at(const shoal_view *v, size_t i, shoal_peer_id *a, shoal_peer_id *b,
                        uint64_t *latency_ns, uint64_t *bw);
/* The default link. */
void shoal_view_default_link(const shoal_view *v, uint64_t *latency_ns, uint64_t *bw);
/* Layers that may have counts: every counted (layer, expert) has layer below
 * this, and expert below shoal_view_layer_n_counts(v, layer). */
uint32_t shoal_view_count_layers(const shoal_view *v);
uint32_t shoal_view_layer_n_counts(const shoal_view *v, uint32_t layer);
/* The count of (layer, expert), or 0 with *known = false. */
uint64_t shoal_view_expert_count(const shoal_view *v, uint32_t layer, uint32_t expert, bool *known);
/* True if some count of this layer was set. */
bool shoal_view_layer_has_counts(const shoal_view *v, uint32_t layer);

/* ---- bucketing with hysteresis ------------------------------------------
 * Quarter-octave geometric buckets for latency, bandwidth and compute:
 * bucket k stands for the value 2^(k/4) (k in 0..255), a step of 19 %, which
 * is below the ~25-50 % that separates one class of link or chip from the
 * next and above the +-5 % that repeated measurements of one link wander by.
 * Hysteresis: the previous bucket is kept while the raw value stays within
 * half a step (~9 %) outside its range, so a value that sits on an edge does
 * not flip back and forth. prev = SHOAL_BUCKET_NONE means no history. */
#define SHOAL_BUCKET_NONE 0xffffffffu

/* The bucket of raw (raw >= 1; 0 maps to bucket 0) given the previous one. */
uint32_t shoal_bucket_geo(uint64_t raw, uint32_t prev);
/* The value bucket k stands for, floor(2^(k/4)) (saturates at UINT64_MAX). */
uint64_t shoal_bucket_geo_value(uint32_t k);
/* Linear buckets for load in percent: steps of 10 points (a peer busy 10 %
 * more changes its effective speed by about one geometric step); the previous
 * bucket is kept while raw stays within 5 points outside its range. Returns the
 * bucketed percentage 0, 10, ..., 90 (above 90 % counts as 90). */
uint32_t shoal_bucket_load(uint32_t raw_pct, uint32_t prev_pct);

#endif
