/*
 * tests/bench/swim_sim.c: how SWIM membership scales, on the in-process
 * simulation (tests/helpers/sim_net): for each N, peers join through a random
 * earlier peer one every --gap-ms; we print the rounds (protocol periods)
 * to converge after the last join ("/log2N": that count over ceil(log2 N),
 * the constant c), the messages and bytes each peer sends per round in
 * steady state (push-pull included), false deaths (dead entries for live
 * peers after those 90 rounds), and the rounds until a killed peer is dead
 * everywhere. Loss, if any, starts after convergence. One round = one protocol period = 500 ms.
 *
 *   tests/bench/swim_sim [--gap-ms 100] [--loss 0.0] [--seed 1] N...
 *   (tests/bench/swim_sim.sh runs N = 16 64 256 1024)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/helpers/sim_net.h"

static uint64_t rs;
static uint64_t rnd(void)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static unsigned clog2(size_t n)
{
	unsigned k = 0;
	while (((size_t)1 << k) < n)
		k++;
	return k;
}

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run(size_t n, double gap_ms, double loss, uint64_t seed)
{
	sim_net_config c;
	memset(&c, 0, sizeof c);
	c.seed = seed;
	c.lat_min_us = 200;
	c.lat_max_us = 2000;
	double t0 = wall();
	sim_net *net = sim_net_new(&c, n);
	if (!net)
		return;
	rs = seed;
	uint64_t period = sim_net_period_us(net);
	for (size_t i = 0; i < n; i++) {
		sim_net_run_until(net, sim_net_now(net) + (uint64_t)(gap_ms * 1000));
		sim_net_add(net, 1, i ? (long)(rnd() % i) : -1);
	}
	unsigned r = 0, max = 200;
	while (r <= max && !sim_net_converged(net)) {
		sim_net_run_until(net, sim_net_now(net) + period);
		r++;
	}
	/* Loss applies from here on: under loss the incarnations never stand
	 * still (a few suspicions and refutations are always in flight), so
	 * we count what matters instead: false deaths. */
	sim_net_set_loss(net, loss);
	/* Steady state: let the piggyback queues drain (each update is sent
	 * 2 x ceil(log2(N+1)) times, ~2 sends per round), then average over
	 * 60 rounds -- the push-pull interval, so its share is counted once. */
	const unsigned steady = 60;
	sim_net_run_until(net, sim_net_now(net) + 30 * period);
	uint64_t m0 = sim_net_msgs(net), b0 = sim_net_bytes(net);
	sim_net_run_until(net, sim_net_now(net) + steady * period);
	double msgs = (double)(sim_net_msgs(net) - m0) / (double)n / steady;
	double bytes = (double)(sim_net_bytes(net) - b0) / (double)n / steady;
	size_t false_dead = 0;
	for (size_t i = 0; i < n; i++)
		false_dead += shoal_swim_count(sim_net_swim(net, i), SHOAL_SWIM_STATE_DEAD);
	/* a kill */
	size_t victim = n / 2;
	sim_net_kill(net, victim);
	unsigned d = 0;
	while (d <= 400 && sim_net_count_seen_as(net, victim, SHOAL_SWIM_STATE_DEAD) < n - 1) {
		sim_net_run_until(net, sim_net_now(net) + period);
		d++;
	}
	printf("%6zu %8.0f %5.2f %6u%s %7.2f %8.2f %9.0f %6zu %8u %8.1f\n", n, gap_ms, loss, r,
	       r > max ? "+" : " ", (double)r / clog2(n), msgs, bytes, false_dead, d, wall() - t0);
	fflush(stdout);
	sim_net_free(net);
}

int main(int argc, char **argv)
{
	double gap = 100, loss = 0;
	uint64_t seed = 1;
	int printed = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--gap-ms") && i + 1 < argc) {
			gap = atof(argv[++i]);
			continue;
		}
		if (!strcmp(argv[i], "--loss") && i + 1 < argc) {
			loss = atof(argv[++i]);
			continue;
		}
		if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
			seed = strtoull(argv[++i], NULL, 10);
			continue;
		}
		size_t n = strtoul(argv[i], NULL, 10);
		if (n < 2) {
			fprintf(stderr, "usage: %s [--gap-ms G] [--loss P] [--seed S] N...\n",
			        argv[0]);
			return 2;
		}
		if (!printed++)
			printf("     N   gap_ms  loss rounds   /log2N msgs/p/r bytes/p/r "
			       "f_dead dead_rnds  wall_s\n");
		run(n, gap, loss, seed);
	}
	if (!printed) {
		fprintf(stderr, "usage: %s [--gap-ms G] [--loss P] [--seed S] N...\n", argv[0]);
		return 2;
	}
	return 0;
}
