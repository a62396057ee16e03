/*
 * tests/helpers/dist_cluster.h: an in-process cluster of distributed-inference
 * peers over loopback xfer links (tests/helpers/dist_cluster.c), for test_dist and
 * tests/bench/dist_pipeline.
 */
#ifndef SHOAL_TESTS_DIST_CLUSTER_H
#define SHOAL_TESTS_DIST_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "models/model.h"
#include "runtime/dist/dist.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/sampler.h"

#define DC_EPOCH     7
#define DC_K_TOP     5
#define DC_MAX_PEERS 8
#define DC_MAX_TOK   64

extern const uint8_t DC_DIGEST[SHOAL_DIGEST_BYTES]; /* the plan */
extern const uint8_t DC_OTHER[SHOAL_DIGEST_BYTES];  /* another plan */

typedef struct dc_peer {
	uint8_t id[SHOAL_PEER_ID_LEN];
	uint8_t tab_id[DC_MAX_PEERS][SHOAL_PEER_ID_LEN];
	shoal_xfer_link *links[DC_MAX_PEERS];
	uint32_t n;
	shoal_dist_stage *st;
	pthread_t th;
	atomic_int stop;
	bool running;
} dc_peer;

typedef struct dc_run_out {
	uint32_t n;
	int32_t id[DC_MAX_TOK];
	float lp[DC_MAX_TOK];
	int32_t top_id[DC_MAX_TOK][DC_K_TOP];
	float top_lp[DC_MAX_TOK][DC_K_TOP];
} dc_run_out;

typedef struct dc_cluster {
	const shoal_model *m;
	dc_peer owner;
	dc_peer st[4];
	dc_peer ex[3];
	dc_peer intruder;
	uint32_t n_st, n_ex;
	shoal_dist_owner *own;
	uint8_t *mask_st, *mask_ex[3], *xpeer;
	/* a tensor group (dc_cluster_up_group): stage tp_stage is run by
	 * st[tp_stage] (member 0, the entry) and tp[0..tp_n-2] (ids 0x50+j;
	 * tp[0] samples when the group is the last stage); gl[m] holds member
	 * m's slice links, apart from the links its stage thread polls */
	uint32_t tp_stage, tp_n;
	uint64_t tp_w[4];
	dc_peer tp[3];
	dc_peer gl[4];
} dc_cluster;

/* Which of p's links reaches peer id (a shoal_dist_link_fn; ctx = p). */
shoal_xfer_link *dc_lookup(void *ctx, const uint8_t id[SHOAL_PEER_ID_LEN]);
/* Connect a to b over loopback (a connects); each side files its end. */
int dc_connect_pair(dc_peer *a, dc_peer *b, uint32_t max_frame);
/* One whole-model engine and the loop of `shoal run`: n_gen tokens with
 * their logprobs and top DC_K_TOP. 0 on success. */
int dc_reference(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                 const shoal_sampler_params *sp, dc_run_out *out);
/* A shoal_dist_token_fn filling a dc_run_out (ctx). */
int dc_collect_token(void *ctx, const shoal_dist_token *t);
/* Owner 0x10..., stages 0x20+i splitting the layers at cuts[] (n_st - 1
 * cuts), expert servers 0x30+s; with n_ex > 0 the stages hold experts
 * x % (n_ex + 1) == 0 and server s those with x % (n_ex + 1) == s + 1.
 * intruder: an extra peer 0x40... with two links to stage 1 (or 0): links[0]
 * on the plan, links[1] with both ends on DC_OTHER. One cluster at a time
 * (the listener is global). 0 on success. */
int dc_cluster_up(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
                  uint32_t n_ex, uint32_t max_frame, uint32_t owner_rows, bool intruder);
/* The same, dense, with stage tp_stage run by a tensor group of tp_n
 * (2..4) members of weights w. */
int dc_cluster_up_group(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
                        uint32_t tp_stage, const uint64_t *w, uint32_t tp_n, uint32_t max_frame);
/* Read by dc_cluster_up when set: stage i's shoal_dist_stage_config
 * device_end (its layers split inside the peer) and the backend name. */
extern const uint32_t *dc_device_end;
extern const char *dc_backend;
/* Read by dc_cluster_up: the prefix cache on (every idle slot) in the
 * stages and the owner. */
extern bool dc_prefix;
void dc_cluster_stop(dc_cluster *c); /* join the stage threads */
void dc_cluster_down(dc_cluster *c); /* stop and free everything */
/* Frames of `kind` sent (sent = 1) or received on p's link to peer `to`. */
uint64_t dc_link_count(dc_peer *p, const uint8_t *to, int sent, unsigned kind);
/* Same ids, logprobs and top pairs, bitwise. */
int dc_same_run(const dc_run_out *a, const dc_run_out *b);
/* A cluster of dc_cluster_up (cuts, n_st, n_ex) runs prompt[np] for
 * n_gen tokens with sampler sp: 1 when its ids and logprobs are bitwise
 * those of one engine (and with n_ex > 0, expert requests left the
 * stages), else 0 with the reason on stderr after `what`. */
int dc_cluster_matches(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                       const uint32_t *cuts, uint32_t n_st, uint32_t n_ex,
                       const shoal_sampler_params *sp, const char *what);
/* A mixture-of-experts model through the cluster shapes every
 * architecture's test checks, each against one engine: 3 stages cut at
 * three[0], three[1] (greedy and seeded), one stage and 2 expert peers
 * (greedy), 2 stages cut at layer 2 and 2 expert peers (seeded). The
 * number of shapes that differ (each named on stderr after `name`). */
int dc_moe_modes(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                 const uint32_t three[2], const char *name);
/* $SHOAL_DATA/models/name, or NULL with a message. */
shoal_model *dc_open_model(const char *name);

#endif
