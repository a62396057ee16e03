/*
 * runtime/node/plan_json.h: cluster descriptions (JSON) <-> the scheduler's view,
 * and plans -> JSON (the object `shoal plan --json` prints and `shoal status
 * --json` embeds).
 *
 * Part: runtime/ (glue: the scheduler stays free of I/O and JSON).
 *
 * Cluster JSON (all fields but peers[].id optional unless said):
 *   { "name": "4x Mac Studio",
 *     "default_link": { "latency_us": 200, "bandwidth_gbit": 1 },
 *     "peers": [ { "id": "<32 hex digits>", "name": "studio-1",
 *                  "memory": "512G" | <bytes>,       (required)
 *                  "bandwidth_gbs": 819,             (memory GB/s, required)
 *                  "compute_gflops": 28000,          (required)
 *                  "load_pct": 0,
 *                  "speculate": "mtp",               (what its sessions draft
 *                                                     with, shoal node's
 *                                                     --speculate: mtp makes
 *                                                     the head peer hold the
 *                                                     MTP layer; default off)
 *                  "gpu": { "memory": "384G",        (the GPU it computes on,
 *                           "bandwidth_gbs": 819,     optional: memory, GB/s
 *                           "compute_gflops": 28000,  and GFLOP/s required;
 *                           "unified": true,          unified: false,
 *                           "backend": "vulkan",      backend: "vulkan",
 *                           "name": "M3 Ultra" } } ], name: "" by default)
 *   the peer's own memory, bandwidth and compute are its CPU's and host
 *   memory's; a unified GPU's memory is part of the peer's memory.
 *   Calibration (each optional; scheduler/view.h): a peer and its "gpu"
 *   may carry "efficiency": { "bandwidth": 0.41, "compute": 0.5 }, the
 *   fractions (0, 1] of their figures a layer of shoal's engine gets
 *   (absent: 1); a peer "hop_us", what its engine pays per hop it takes
 *   in beyond the link, and "round_us", per tensor-group round beyond
 *   the link (absent: 0). models/specs/README.md: the examples' figures.
 *     "links": [ { "a": "<id or name>", "b": "<id or name>",
 *                  "latency_us": 30, "bandwidth_gbit": 80 } ],
 *     "routing": [ { "layer": 3, "counts": [ 120, 7, ... ] } ] }
 * memory: bytes, or a number with K/M/G/T or KiB/MiB/GiB/TiB (powers of
 * 1024) or KB/MB/GB/TB (powers of 1000). Links are symmetric; a pair not
 * listed gets default_link, itself 200 us and 1 Gbit/s when absent (a
 * gigabit LAN with the TCP stack of idle machines on both ends).
 */
#ifndef SHOAL_RUNTIME_PLAN_JSON_H
#define SHOAL_RUNTIME_PLAN_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "scheduler/plan.h"
#include "scheduler/view.h"

/* A view from cluster JSON text / a file. The caller owns *out. Bad input ->
 * SHOAL_ERR_FORMAT / RANGE / INVAL with a reason naming the field. */
shoal_err shoal_cluster_parse(const char *text, size_t len, shoal_view **out, char *why,
                              size_t why_len);
shoal_err shoal_cluster_load(const char *path, shoal_view **out, char *why, size_t why_len);
/* The view as cluster JSON (new reference, NULL when out of memory):
 * memory in bytes, the default link, the links set, the routing counts;
 * parsing it back gives the same view. */
json_t *shoal_cluster_to_json(const shoal_view *v);
/* Parse "512G", "64 GiB", "1.5T", "16000000000" into bytes. */
shoal_err shoal_cluster_parse_bytes(const char *s, uint64_t *out);

/* The plan as a JSON object (new reference, NULL when out of memory):
 *   { "model", "epoch", "digest" (64 hex), "kept",
 *     "predicted_ns_per_token", "predicted_ms_per_token", "tokens_per_second",
 *     "moved_bytes",
 *     "stages": [ { "peer" (32 hex), "name", "first_layer", "end_layer",
 *                   "devices": [ { "device": "gpu" | "cpu", "backend" ("vulkan",
 *                                  "cpu"), "first_layer", "end_layer" } ]
 *                   (the stage's layers by device: the GPU's first),
 *                   "members": [ { "peer", "name", "weight", "share" } ]
 *                   (a tensor group only: its members and their shares) } ],
 *     "embedding": { "peer", "name" }, "head": { "peer", "name", "device"
 *                   ("gpu" or "cpu"), "mtp": true and "mtp_bytes" (only
 *                   where the head peer holds DeepSeek's MTP layer: its
 *                   weights, KV and the embedding it shares; the bytes
 *                   not of a plan read back from its encoding), "members"
 *                   (the last stage a group: the head split by vocab rows
 *                   among its members, the stage's shares; "peer" gathers
 *                   the logits and samples) },
 *     "experts": [ { "layer", "owners": [ { "peer", "name",
 *                    "experts": [ ids ] } ] } ]          (MoE layers only)
 *     "memory": [ { "peer", "name", "weights_bytes", "kv_bytes",
 *                   "used_bytes", "capacity_bytes", "experts", "gpu_bytes"
 *                   (of used_bytes, those on its GPU), "gpu_capacity_bytes"
 *                   (0: no GPU) } ] }
 * Arrays are in pipeline order (stages), layer order (experts) and peer id
 * order (owners, memory), so the text is stable for a given plan. */
json_t *shoal_plan_to_json(const shoal_plan *p);

#endif
