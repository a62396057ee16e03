/*
 * runtime/node/node_impl.h: the inside of runtime/node/node.h, shared by
 * the files of the node's event loop: node.c (new/free, the loop),
 * node_record.c (our record, the probes), node_ctl.c (membership,
 * discovery and control messages) and node_fetch.c (a peer without the
 * model file; the HTTP API). Everything here belongs to the node thread,
 * except the status cache the HTTP API's threads read (under status_mu).
 */
#ifndef SHOAL_RUNTIME_NODE_IMPL_H
#define SHOAL_RUNTIME_NODE_IMPL_H

#include "runtime/node/node.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/ctl.h"
#include "net/identity.h"
#include "net/keycheck.h"
#include "net/linkprobe.h"
#include "net/record.h"
#include "net/swim.h"
#include "net/sysinfo.h"
#include "net/wire.h"
#include "runtime/api/api.h"
#include "runtime/node/serve.h"
#include "runtime/node/weights.h"

/* Versions this node speaks; a peer that differs is kept in the view but
 * left out of plans (net/swim.c says why in `shoal status`). */
/* 10: the SPEC control op (the owner's pauses: MTP guesses not wanted);
 * 9: OPEN's MTP bit (word 8, bit 29), result rows with the MTP layer's guess
 * (an odd dim); 8: a decoding step may carry drafted rows, the last stage samples every row
 * past the prompt and goes back over the choices of rows not kept (speculation);
 * 7: OPEN carries a grammar and a constrained replay's generated ids (24
 * words, both after the tail); 6: OPEN carries OpenAI's penalties and logit bias (22 words, the
 * bias pairs before the tail); 5: OPEN's no-logprob bit, a group's head gather (round HEAD); 4:
 * served epochs; 3: OPEN carries the first step */
#define SHOAL_NODE_PROTO_VERSION 10
/* 3: a peer's GPU (its record's devices) takes a stage's first layers;
 * 2: a last-stage tensor group splits the head by vocab rows */
#define SHOAL_NODE_SCHED_VERSION 3

/* Timer multiples of the base period B (100 ms by default):
 * PROBE: one link probe every 2 B; with 3 peers x 1 endpoint pair each
 *   pair is sampled every 600 ms, ~2 small messages/s per peer.
 * TARGETS: rebuild the probe targets from the view every 10 B (1 s), so a
 *   new peer is measured within a second of joining.
 * RECORD: republish our record (available memory, load, links) every
 *   50 B (5 s): each republish is gossiped to everyone, so this bounds the
 *   gossip a node causes to one record per 5 s.
 * IDLE: close a DEALER unused for 600 B (60 s); gossip reaches every live
 *   peer far more often than that. */
#define SHOAL_NODE_PROBE_MULT   2u
#define SHOAL_NODE_TARGETS_MULT 10u
#define SHOAL_NODE_RECORD_MULT  50u
/* the status JSON the HTTP API shows, rebuilt every this many base periods */
#define SHOAL_NODE_API_STATUS_MULT 5u
#define SHOAL_NODE_IDLE_MULT       600u
/* Dropped-message log: at most DROPLOG_BURST lines per DROPLOG_MULT B
 * (10 per 10 s), as membership does, so a flood cannot fill the disk. */
#define SHOAL_NODE_DROPLOG_BURST 10u
#define SHOAL_NODE_DROPLOG_MULT  100u
/* Key check (node_keycheck.c): ask unanswered seeds every KC_ASK_MULT B
 * (1 s), so a mismatch is logged on both sides within about a second of
 * the later start; log a mismatch with one peer once per KC_LOG_MULT B
 * (30 s), remembering the last KC_LOGS peers. */
#define SHOAL_NODE_KC_ASK_MULT 10u
#define SHOAL_NODE_KC_LOG_MULT 300u
#define SHOAL_NODE_KC_LOGS     16
/* A compute probe taken under load is retaken after a whole period of
 * RETAKE_MULT B (10 s) on a quiet machine (node_probe.c). */
#define SHOAL_NODE_RETAKE_MULT 100u
/* malloc_trim every TRIM_MULT B (30 s): node.c says why */
#define SHOAL_NODE_TRIM_MULT 300u
#define SHOAL_NODE_MAX_FDS                                                                         \
	48 /* discovery ops (<= 64 in flight, usually < 10) + listener + key check */

struct shoal_node {
	shoal_node_config cfg;
	char state_dir[1024];
	char cluster[SHOAL_RECORD_NAME_MAX];
	int lock_fd;
	shoal_identity ident;
	shoal_key key;
	int keyed;
	shoal_ctl *ctl;
	shoal_swim *sw;
	shoal_swim_ops swim_ops;
	shoal_linkprobe *lp;
	shoal_sysinfo si;
	shoal_record rec;
	int data_fd;
	uint16_t data_port;
	char listen_ip[64]; /* "0.0.0.0" or a specific address */
	int wildcard;
	const shoal_discovery_ops *disc;
	void *disc_state;
	char **seeds; /* resolved "tcp://IP:PORT" */
	size_t n_seeds;
	uint64_t base_us;
	shoal_wire_buf out;
	uint64_t persisted_inc;
	uint64_t droplog_window_us; /* end of the current log window */
	uint32_t droplog_lines;     /* lines logged in it */
	uint64_t droplog_quiet;     /* drops not logged since the last line */
	shoal_serve *cl;            /* the model served (NULL: none) */
	/* --model-id without --model: the header job until the cluster exists */
	shoal_weights_fetcher *wf;
	bool fetch_any; /* adopt the model id the serving peers agree on */
	bool have_fetch_id;
	uint8_t fetch_id[SHOAL_MODEL_ID_BYTES];
	uint64_t fetch_retry_us;
	uint64_t next_cluster_us; /* next look at the view for planning */
	shoal_api *api;           /* the HTTP API (NULL: none) */
	bool api_named;           /* it knows the model's name */
	shoal_serve_api api_hub;  /* what the API's ops reach (serve.h) */
	shoal_api_ops api_ops;
	/* the status JSON the API shows, refreshed by the node thread */
	pthread_mutex_t status_mu;
	bool status_mu_ok;
	char *status_cache;
	uint64_t next_status_us;
	/* the compute probe (node_probe.c): taken under load, retakes allowed,
	 * the next look, CPU time at the last look */
	bool probe_loaded;
	bool probe_retake;
	uint64_t probe_next_us;
	shoal_sysinfo_cpu probe_cpu;
	uint64_t probe_engine_us; /* the last check against the engine (0: none) */
	uint64_t next_trim_us;    /* node.c: the next malloc_trim */
	/* the key check beside the control port (-1: none) */
	int kc_fd;
	uint64_t kc_next_us;
	int8_t *kc_seed_ok; /* per seed: 0 unanswered, 1 our key, -1 another */
	struct {
		char who[96];
		uint64_t until_us;
	} kc_log[SHOAL_NODE_KC_LOGS];
};

/* The functions the files share, by file, in the order calls go: node.c
 * calls the others; node_fetch.c calls node_serve.c and node_record.c;
 * node_ctl.c and node_serve.c call node_record.c (tests/sh/cycle_check.sh). */

/* node_fetch.c: a peer without the model file, and the HTTP API. */
shoal_err node__api_start(shoal_node *n, char *why, size_t why_len);
void node__api_name_from_peers(shoal_node *n); /* --model-id: the name the peers give */
shoal_err node__fetch_new(shoal_node *n, char *why, size_t why_len);
void node__fetch_tick(shoal_node *n); /* once per base period until the cache exists */

/* node_ctl.c: membership, discovery and control-socket callbacks (ctx, ud:
 * the node), the status JSON, the data listener without a model. */
shoal_err node__swim_send(void *ctx, const char *endpoint, const uint8_t *buf, size_t len);
void node__member_changed(void *ctx, const shoal_swim_member *m, shoal_swim_state old, int is_new);
void node__incarnation_changed(void *ctx, uint64_t inc);
void node__on_found(void *ud, const shoal_discovery_found *f);
char *node__status_json(shoal_node *n);
void node__on_disconnect(void *ud, int fd);
void node__on_message(void *ud, const shoal_ctl_route *from, const uint8_t *buf, size_t len);
shoal_err node__data_listen(shoal_node *n, char *why, size_t why_len);

/* node_keycheck.c: the key check (net/keycheck.h): the UDP socket beside
 * the control port, answering asks, asking seeds and found peers. */
void node__keycheck_open(shoal_node *n); /* after the control socket */
void node__keycheck_close(shoal_node *n);
void node__keycheck_ask(shoal_node *n, const char *endpoint);
void node__keycheck_serve(shoal_node *n); /* its descriptor is readable */
void node__keycheck_tick(shoal_node *n);

/* node_probe.c: the compute probe's figures into r (kept ones, or
 * measured), and their retake once the machine is quiet (true: the record
 * changed; it is published at the next record period). */
void node__probe_compute(shoal_node *n, shoal_record *r);
bool node__probe_retake_tick(shoal_node *n);
/* The engine's decode runs took `ratio` times what the plan predicted
 * from the figures, persistently (serve_timing.c): measure again and
 * replace the figures when the new ones move toward what the engine
 * says (true: the record changed). */
bool node__probe_engine_check(shoal_node *n, double ratio);

/* node_serve.c: the serving state: made (wc: a weights cache, or NULL for
 * --model; the data listener becomes its xfer listener), and its
 * planning tick, which republishes our record when readiness changed. */
shoal_err node__serve_new(shoal_node *n, shoal_wcache *wc, char *why, size_t why_len);
void node__serve_tick(shoal_node *n);

/* node_record.c: the clock and randomness SWIM is given, the control file,
 * our record and the link probes. */
uint64_t node__now_us(void *ctx);
uint64_t node__rand64(void *ctx);
void node__write_control(shoal_node *n);
void node__remove_control(shoal_node *n);
void node__record_init(shoal_node *n);
void node__record_refresh(shoal_node *n);
void node__targets(shoal_node *n);   /* the link probes' targets, from the view */
void node__probe_one(shoal_node *n); /* one link probe */

#endif
