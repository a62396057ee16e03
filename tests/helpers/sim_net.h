/*
 * tests/helpers/sim_net.h: many SWIM peers in one process, over an in-memory
 * transport on a virtual clock (for tests/unit/test_swim.c and
 * tests/bench/swim_sim.c).
 *
 * Each peer is a shoal_swim whose ops read the shared virtual clock, draw
 * from its own seeded generator and send into one event queue; a message
 * is delivered after a random latency unless dropped (loss rate, a muted
 * peer, a killed peer). Events run in (time, insertion) order, so a run is
 * a pure function of the seed. Peer i's control endpoint is "sim://i".
 */
#ifndef SHOAL_TESTS_SIM_NET_H
#define SHOAL_TESTS_SIM_NET_H

#include <stddef.h>
#include <stdint.h>

#include "net/swim.h"

typedef struct sim_net sim_net;

typedef struct sim_net_config {
	uint64_t seed;
	uint32_t lat_min_us, lat_max_us; /* one-way latency, uniform */
	double loss;                     /* probability that a message is lost */
	/* 0: the clock stands still while a peer handles an event (every read
	 * in one tick or receive gives the same time). n: every read returns
	 * at least n us more than the read before, as a real clock moves on
	 * while a tick runs (reads stay monotonic across events). */
	uint32_t clock_read_us;
	/* A tick runs up to this many us (uniform) after the time the peer
	 * asked for, as a poll loop with millisecond timeouts on a busy CPU
	 * does; 0: on time. */
	uint32_t tick_late_us;
	shoal_swim_config swim; /* zeros: defaults */
} sim_net_config;

/* Room for max_peers peers. NULL when out of memory. */
sim_net *sim_net_new(const sim_net_config *c, size_t max_peers);
void sim_net_free(sim_net *net);

/* Start a new peer (id derived from the seed and index) at `incarnation`;
 * it joins through `seed_peer` (-1: none). Returns its index, -1 if full. */
long sim_net_add(sim_net *net, uint64_t incarnation, long seed_peer);
/* Stop peer i abruptly (messages to it are dropped from now on). */
void sim_net_kill(sim_net *net, size_t i);
/* Start peer i again with the same id, fresh state, at `incarnation`,
 * joining through seed_peer. */
int sim_net_restart(sim_net *net, size_t i, uint64_t incarnation, long seed_peer);
/* Drop every message from and to peer i while `on`. */
void sim_net_mute(sim_net *net, size_t i, int on);
/* A partition: messages pass only between peers of the same side (all
 * start on side 0). */
void sim_net_set_side(sim_net *net, size_t i, int side);
void sim_net_set_loss(sim_net *net, double loss);
/* Make peer i's record say scheduler version v (before it joins). */
void sim_net_set_sched_version(sim_net *net, uint32_t v);

void sim_net_run_until(sim_net *net, uint64_t t_us);
uint64_t sim_net_now(const sim_net *net);
uint64_t sim_net_period_us(const sim_net *net);

size_t sim_net_n(const sim_net *net);
int sim_net_running(const sim_net *net, size_t i);
shoal_swim *sim_net_swim(sim_net *net, size_t i); /* NULL if killed */
const shoal_peer_id *sim_net_id(const sim_net *net, size_t i);

/* 1 when every running, unmuted peer knows every other one as alive with
 * the incarnation and record version that peer has for itself, and knows
 * no other member as alive. */
int sim_net_converged(sim_net *net);
/* How many running peers hold peer i in state s. */
size_t sim_net_count_seen_as(sim_net *net, size_t i, shoal_swim_state s);

/* Totals since creation: messages handed to the network, and their bytes. */
uint64_t sim_net_msgs(const sim_net *net);
uint64_t sim_net_bytes(const sim_net *net);

#endif
