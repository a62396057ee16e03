/*
 * runtime/node/node.h: one peer of the cluster: the event loop that glues the
 * control sockets (net/ctl), membership (net/swim), discovery
 * (net/discovery), identity and keys, machine and link probes.
 *
 * Part: runtime/. `shoal node` builds a config from its flags, then
 * shoal_node_new + shoal_node_run until SIGINT/SIGTERM sets *stop, which
 * leaves the cluster gracefully. The node writes its control endpoint into
 * <state-dir>/control so that `shoal status` finds it.
 *
 * Timers, all multiples of the base period B (--gossip-ms, default 100):
 * SWIM's own (see net/swim.c); a link probe every SHOAL_NODE_PROBE_MULT*B;
 * link targets rebuilt every SHOAL_NODE_TARGETS_MULT*B; our record
 * (available memory, load, links) republished every SHOAL_NODE_RECORD_MULT*B;
 * idle DEALERs closed after SHOAL_NODE_IDLE_MULT*B.
 */
#ifndef SHOAL_RUNTIME_NODE_H
#define SHOAL_RUNTIME_NODE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/discovery.h"
#include "net/key.h"
#include "net/xfer.h"
#include "runtime/engine/draft_kinds.h"

#define SHOAL_NODE_DEFAULT_GOSSIP_MS 100 /* SWIM's own default base period */
#define SHOAL_NODE_DEFAULT_CLUSTER   "default"
#define SHOAL_NODE_CONTROL_FILE      "control" /* in the state dir, for `shoal status` */
/* 64 GiB: a Q4 70B model (40 GiB) and a smaller one side by side. */
#define SHOAL_NODE_DEFAULT_CACHE_MAX (64ull << 30)

typedef struct shoal_node shoal_node;

typedef struct shoal_node_config {
	const char *state_dir;    /* required, created if missing */
	const char *name;         /* NULL: host name */
	const char *listen;       /* "ADDR[:PORT]"; NULL: 0.0.0.0:47470 */
	const char *const *seeds; /* "HOST[:PORT]" each */
	size_t n_seeds;
	int no_mdns;
	int reprobe;          /* measure compute speed again, not the kept figures */
	const shoal_key *key; /* NULL: insecure (caller checked --insecure) */
	const char *cluster;  /* NULL: "default" */
	int threads;          /* compute threads; 0: all cores */
	/* --backend: a backend kind's name (runtime/backends.h), NULL or
	 * "auto"; its devices go in our record and its stages compute with it.
	 * Borrowed: must outlive the node. */
	const char *backend;
	const char *data_listen; /* "ADDR:PORT"; NULL: ephemeral on the listen address */
	uint32_t gossip_ms;      /* base period; 0: default */
	const shoal_discovery_ops *discovery; /* NULL: DNS-SD */
	/* Serving a model (runtime/node/serve.h); model NULL: membership only. */
	const char *model;  /* GGUF file */
	uint64_t mem_limit; /* bytes offered at most; 0: what is available */
	uint32_t ctx;       /* KV context per session; 0: the model's */
	uint32_t sessions;  /* KV sessions per stage; 0: 2 (every peer the same) */
	int spread_experts; /* ask the scheduler to spread MoE experts */
	int tensor_groups;  /* let it plan tensor groups (policy: same on every peer) */
	uint32_t link_us;   /* link latency the plan assumes; 0: 200 (policy too) */
	int spin_us;        /* the data thread's spin before a wait, us; 0: the
	                       default (SHOAL_SERVE_HOP_SPIN_US, cluster.h), < 0: none */
	/* The HTTP API (runtime/api/api.h): "HOST[:PORT]" (NULL: none); the
	 * Bearer key its requests must carry (NULL: none). */
	const char *api;
	const char *api_key;
	const char *api_cors; /* --api-cors ORIGIN (NULL: no CORS) */
	/* Without model: serve this model id (64 hex digits, or "any": the one
	 * the serving peers agree on), its weights fetched from the peers into
	 * <state-dir>/weights (runtime/node/weights.h); NULL: membership only. */
	const char *model_id;
	uint64_t cache_max; /* bytes the weights cache may hold; 0: the default */
	/* --prefix-cache: bytes of ended sessions' KV each stage keeps for
	 * their prefixes (runtime/dist/dist.h); 0: its idle session slots
	 * (the default), UINT64_MAX: off. */
	uint64_t prefix_cache;
	/* --speculate, --draft-max: the drafter of the sessions this peer
	 * owns (runtime/engine/draft_kinds.h; OFF: none) and its ids per step
	 * at most (0: the default). */
	shoal_speculate_kind speculate;
	uint32_t draft_max;
	/* --draft FILE: a draft model with the model's vocabulary for
	 * --speculate draft and auto (checked when serving starts); NULL:
	 * none. Borrowed: outlives the node. */
	const char *draft;
	shoal_xfer_rdma_opts rdma; /* --rdma-device, --rdma-gid, ... (net/xfer.h) */
} shoal_node_config;

/* Load the identity (raising its incarnation), lock the state dir, bind
 * the control and data sockets, probe the machine. Nothing is sent yet.
 * *out is owned by the caller (shoal_node_free). */
shoal_err shoal_node_new(const shoal_node_config *cfg, shoal_node **out, char *why, size_t why_len);

/* Run until *stop becomes non-zero, then leave gracefully (bounded by
 * SWIM's linger time) and return. */
shoal_err shoal_node_run(shoal_node *n, volatile sig_atomic_t *stop);

void shoal_node_free(shoal_node *n);

#endif
