/*
 * tests/unit/test_swim.c: the SWIM membership of net/swim.c, many peers in one
 * process over tests/helpers/sim_net (virtual time, so minutes of gossip take
 * seconds): convergence in O(log N) rounds for N = 16, 64, 256; no false
 * deaths under 10% loss for 10 minutes; a killed peer declared dead by all
 * within the derived bound; a muted peer refutes its suspicion; graceful
 * leave; restart with the same id; incompatible versions; garbage input;
 * dead entries kept their full time in a small, fast cluster.
 *
 * The bounds are written in protocol periods ("rounds") and derived next to
 * each test from the constants of net/swim.c (PROBE_MULT 5, SUSPECT_MULT 4).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/swim.h"
#include "net/wire.h"
#include "runtime/node/status_json.h"
#include "tests/helpers/sim_net.h"
#include "tests/unit/test.h"

/* CONVERGE_C: rounds to converge <= CONVERGE_C * ceil(log2 N) once the last
 * peer has joined (10 joins/s, each through a random earlier peer).
 * Measured with tests/bench/swim_sim, seeds 1-6, N = 16/64/256: at most
 * 1.25 * ceil(log2 N) (5 rounds at N = 16), typically 0.6-1.0; 2 leaves
 * 1.6x headroom. Push gossip reaches everyone in ~log2 N + ln N rounds,
 * and both the ping and the ack carry updates, which halves that. */
#define CONVERGE_C   2
#define SUSPECT_MULT 4 /* net/swim.c default */

static unsigned clog2(size_t n)
{
	unsigned k = 0;
	while (((size_t)1 << k) < n)
		k++;
	return k;
}

/* ceil(log2(n + 1)) as net/swim.c computes it. */
static unsigned log2n(size_t n)
{
	unsigned k = clog2(n + 1);
	return k ? k : 1;
}

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static sim_net *make_net(uint64_t seed, size_t n)
{
	sim_net_config c;
	memset(&c, 0, sizeof c);
	c.seed = seed;
	c.lat_min_us = 200;
	c.lat_max_us = 2000;
	return sim_net_new(&c, n + 4);
}

/* Peers join one every gap_us, each through a random earlier peer. */
static void grow(sim_net *net, size_t n, uint64_t gap_us)
{
	for (size_t i = sim_net_n(net); i < n; i++) {
		long seed = i ? (long)(rnd() % i) : -1;
		sim_net_run_until(net, sim_net_now(net) + gap_us);
		sim_net_add(net, 1, seed);
	}
}

/* Run round by round until converged; the number of rounds, or max+1. */
static unsigned rounds_to_converge(sim_net *net, unsigned max)
{
	uint64_t period = sim_net_period_us(net);
	for (unsigned r = 0; r <= max; r++) {
		if (sim_net_converged(net))
			return r;
		sim_net_run_until(net, sim_net_now(net) + period);
	}
	return max + 1;
}

static void converge_n(size_t n, uint64_t seed)
{
	sim_net *net = make_net(seed, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	unsigned bound = CONVERGE_C * clog2(n);
	unsigned r = rounds_to_converge(net, 4 * bound);
	printf("  N=%zu: converged %u rounds after the last join (bound %u)\n", n, r, bound);
	sim_net_free(net);
	ASSERT_LE(r, bound);
}

static void test_converge_16(void)
{
	converge_n(16, 1);
}
static void test_converge_64(void)
{
	converge_n(64, 2);
}
static void test_converge_256(void)
{
	converge_n(256, 3);
}

/* 10% loss on every message for 10 simulated minutes: suspicions happen
 * (about 0.8% of probes), but each is refuted long before the suspicion
 * timeout (4 x 7 = 28 rounds at N = 64), so nobody is ever declared dead. */
static void test_loss_no_false_death(void)
{
	const size_t n = 64;
	sim_net *net = make_net(4, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	sim_net_set_loss(net, 0.10);
	uint64_t period = sim_net_period_us(net), end = sim_net_now(net) + 600ull * 1000000;
	size_t dead = 0;
	while (sim_net_now(net) < end && !dead) {
		sim_net_run_until(net, sim_net_now(net) + period);
		for (size_t i = 0; i < n; i++)
			dead += shoal_swim_count(sim_net_swim(net, i), SHOAL_SWIM_STATE_DEAD);
	}
	uint64_t suspicions = 0, refutations = 0;
	for (size_t i = 0; i < n; i++) {
		shoal_swim_stats st;
		shoal_swim_get_stats(sim_net_swim(net, i), &st);
		suspicions += st.suspicions;
		refutations += st.refutations;
	}
	printf("  10%% loss, 10 min, N=%zu: %llu suspicions, %llu refutations, %zu dead\n", n,
	       (unsigned long long)suspicions, (unsigned long long)refutations, dead);
	sim_net_free(net);
	ASSERT_EQ(dead, 0);
	ASSERT_GT(suspicions, 0); /* the loss did bite: the test can fail */
}

/* A killed peer is dead everywhere within
 *   detect + 1 + SUSPECT_MULT * ceil(log2(N+1)) + CONVERGE_C * ceil(log2 N)
 * rounds: detect = ceil(log2 N) rounds for the first failed probe (each
 * round the N-1 others each probe one peer; the chance nobody probes the
 * victim in r rounds is ~e^-r), 1 round for the probe and its indirect
 * attempts, the suspicion timeout, then the dead news spreads like any. */
static void test_kill_detected(void)
{
	const size_t n = 64;
	sim_net *net = make_net(5, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	const size_t victim = 17;
	sim_net_kill(net, victim);
	unsigned bound = clog2(n) + 1 + SUSPECT_MULT * log2n(n) + CONVERGE_C * clog2(n);
	uint64_t period = sim_net_period_us(net);
	unsigned r = 0;
	while (r <= 2 * bound &&
	       sim_net_count_seen_as(net, victim, SHOAL_SWIM_STATE_DEAD) < n - 1) {
		sim_net_run_until(net, sim_net_now(net) + period);
		r++;
	}
	printf("  killed peer dead at all %zu others after %u rounds (bound %u)\n", n - 1, r,
	       bound);
	ASSERT_LE(r, bound);
	/* and nobody else died */
	for (size_t i = 0; i < n; i++)
		if (i != victim)
			ASSERT_EQ(sim_net_count_seen_as(net, i, SHOAL_SWIM_STATE_DEAD), 0);
	sim_net_free(net);
}

/* Mute a peer for 6 rounds: others suspect it (the 63 probers find it
 * silent) but the timeout (28 rounds) is far off; unmuted, it learns of the
 * suspicion (buddy system / gossip) and refutes with a higher incarnation. */
static void test_suspect_refutes(void)
{
	const size_t n = 64, k = 9;
	sim_net *net = make_net(6, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	uint64_t inc0 = shoal_swim_incarnation(sim_net_swim(net, k));
	uint64_t period = sim_net_period_us(net);
	size_t max_suspect = 0;
	sim_net_mute(net, k, 1);
	for (int r = 0; r < 6; r++) {
		sim_net_run_until(net, sim_net_now(net) + period);
		size_t s = sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_SUSPECT);
		if (s > max_suspect)
			max_suspect = s;
	}
	sim_net_mute(net, k, 0);
	unsigned r = rounds_to_converge(net, 40);
	uint64_t inc1 = shoal_swim_incarnation(sim_net_swim(net, k));
	printf("  muted peer: suspected by up to %zu, incarnation %llu -> %llu, converged in %u\n",
	       max_suspect, (unsigned long long)inc0, (unsigned long long)inc1, r);
	ASSERT_GT(max_suspect, 0);
	ASSERT_GT(inc1, inc0);
	ASSERT_LE(r, 40);
	ASSERT_EQ(sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_ALIVE), n - 1);
	sim_net_free(net);
}

/* A partition into halves that heals: each half declares the other dead,
 * and once messages pass again the halves merge (exchanges with dead
 * members: nobody probes them). */
static void test_partition_heals(void)
{
	const size_t n = 8;
	sim_net *net = make_net(11, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	uint64_t period = sim_net_period_us(net);
	for (size_t i = n / 2; i < n; i++)
		sim_net_set_side(net, i, 1);
	sim_net_run_until(net, sim_net_now(net) + 60 * period);
	ASSERT_EQ(sim_net_count_seen_as(net, 0, SHOAL_SWIM_STATE_DEAD), n / 2);
	ASSERT_EQ(sim_net_count_seen_as(net, n - 1, SHOAL_SWIM_STATE_DEAD), n / 2);
	for (size_t i = 0; i < n; i++)
		sim_net_set_side(net, i, 0);
	unsigned r = rounds_to_converge(net, 60);
	printf("  halves of %zu merged %u periods after the partition healed\n", n / 2, r);
	ASSERT_LE(r, 60);
	for (size_t i = 0; i < n; i++)
		ASSERT_EQ(sim_net_count_seen_as(net, i, SHOAL_SWIM_STATE_ALIVE), n - 1);
	sim_net_free(net);
}

/* Graceful leave: left at everyone (never dead) after the linger. */
static void test_leave(void)
{
	const size_t n = 32, k = 5;
	sim_net *net = make_net(7, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	shoal_swim *sw = sim_net_swim(net, k);
	shoal_swim_leave(sw);
	sim_net_run_until(net, sim_net_now(net) + shoal_swim_leave_linger_us(sw));
	sim_net_kill(net, k);
	size_t left = sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_LEFT);
	/* Much later (past any suspicion timeout) still left, not dead. */
	sim_net_run_until(net, sim_net_now(net) + 60 * sim_net_period_us(net));
	size_t left_later = sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_LEFT);
	size_t dead = sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_DEAD);
	printf("  left: %zu of %zu after the linger, %zu later, %zu dead\n", left, n - 1,
	       left_later, dead);
	ASSERT_EQ(left, n - 1);
	ASSERT_EQ(left_later, n - 1);
	ASSERT_EQ(dead, 0);
	sim_net_free(net);
}

/* Graceful leave of a small cluster under loss (the CI's mesh_loopback
 * flake: of 4 peers only one heard a leave). Every peer must hear it
 * within the linger: the leaver tells each live peer directly, again every
 * period of the linger, so a peer misses it only if all of those messages
 * and every piggyback are lost. 40 seeds, 4 peers, 30% loss. */
static void test_leave_small_lossy(void)
{
	const size_t n = 4, k = 3;
	unsigned missed = 0;
	for (uint64_t seed = 1; seed <= 40; seed++) {
		sim_net *net = make_net(100 + seed, n);
		ASSERT_TRUE(net != NULL);
		grow(net, n, 100000);
		ASSERT_LE(rounds_to_converge(net, 100), 100);
		sim_net_set_loss(net, 0.3);
		shoal_swim *sw = sim_net_swim(net, k);
		shoal_swim_leave(sw);
		sim_net_run_until(net, sim_net_now(net) + shoal_swim_leave_linger_us(sw));
		sim_net_kill(net, k);
		missed += (unsigned)(n - 1 - sim_net_count_seen_as(net, k, SHOAL_SWIM_STATE_LEFT));
		sim_net_free(net);
	}
	printf("  4 peers, 30%% loss, 40 leaves: %u peer(s) did not hear one\n", missed);
	ASSERT_EQ(missed, 0);
}

/* Restart with the same id: fresh state at the persisted incarnation + 1,
 * and again with a forgotten incarnation (0): the peer sees its old life
 * alive at a higher incarnation and out-ranks it. One entry, alive. */
static void restart_case(uint64_t new_inc, uint64_t seed)
{
	const size_t n = 32, k = 3;
	sim_net *net = make_net(seed, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	uint64_t old = shoal_swim_incarnation(sim_net_swim(net, k));
	sim_net_restart(net, k, new_inc ? old + new_inc : 0, (long)(k + 1));
	unsigned r = rounds_to_converge(net, 60);
	uint64_t now_inc = shoal_swim_incarnation(sim_net_swim(net, k));
	printf("  restart at incarnation %llu (was %llu): now %llu, converged in %u rounds\n",
	       (unsigned long long)(new_inc ? old + new_inc : 0), (unsigned long long)old,
	       (unsigned long long)now_inc, r);
	ASSERT_LE(r, 60);
	ASSERT_GT(now_inc, old);
	for (size_t i = 0; i < n; i++) {
		shoal_swim_member *v;
		size_t nv, same = 0;
		ASSERT_EQ(shoal_swim_view(sim_net_swim(net, i), &v, &nv), SHOAL_OK);
		for (size_t j = 0; j < nv; j++)
			same += !shoal_peer_id_cmp(&v[j].id, sim_net_id(net, k));
		/* the view is in id order */
		for (size_t j = 1; j < nv; j++)
			ASSERT_LT(shoal_peer_id_cmp(&v[j - 1].id, &v[j].id), 0);
		shoal_swim_view_free(v);
		ASSERT_EQ(same, 1);
		ASSERT_EQ(nv, n);
	}
	sim_net_free(net);
}

static void test_restart_persisted(void)
{
	restart_case(1, 8);
}
static void test_restart_forgotten(void)
{
	restart_case(0, 9);
}

/* A peer whose scheduler version differs is in the view, alive, marked
 * incompatible with a reason; the JSON says so too. */
static void test_incompatible(void)
{
	const size_t n = 8;
	sim_net *net = make_net(10, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n - 1, 100000);
	sim_net_set_sched_version(net, 2);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 60), 60);
	shoal_swim_member *v;
	size_t nv, odd = 0;
	ASSERT_EQ(shoal_swim_view(sim_net_swim(net, 0), &v, &nv), SHOAL_OK);
	for (size_t j = 0; j < nv; j++) {
		if (!shoal_peer_id_cmp(&v[j].id, sim_net_id(net, n - 1))) {
			odd++;
			ASSERT_FALSE(v[j].compatible);
			ASSERT_TRUE(strstr(v[j].why_incompatible, "scheduler v2") != NULL);
			ASSERT_EQ(v[j].state, SHOAL_SWIM_STATE_ALIVE);
			json_t *o = shoal_status_member_json(&v[j]);
			ASSERT_TRUE(o != NULL);
			ASSERT_STR_EQ(json_string_value(json_object_get(o, "state")), "alive");
			ASSERT_TRUE(json_is_string(json_object_get(o, "why_incompatible")));
			ASSERT_EQ(strlen(json_string_value(json_object_get(o, "id"))), 32);
			json_decref(o);
		} else {
			ASSERT_TRUE(v[j].compatible);
		}
	}
	shoal_swim_view_free(v);
	sim_net_free(net);
	ASSERT_EQ(odd, 1);
}

/* A record change (set_record) reaches everyone within the convergence
 * bound, and the view carries the new figures. */
static void test_record_update(void)
{
	const size_t n = 64, k = 11;
	sim_net *net = make_net(11, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	shoal_record r;
	shoal_swim_get_record(sim_net_swim(net, k), &r);
	uint64_t v0 = r.version;
	r.mem_weights = 123456789;
	r.n_links = 1;
	r.links[0].peer = *sim_net_id(net, 0);
	r.links[0].rtt_us = 250;
	ASSERT_EQ(shoal_swim_set_record(sim_net_swim(net, k), &r, NULL, 0), SHOAL_OK);
	shoal_swim_get_record(sim_net_swim(net, k), &r);
	ASSERT_U64_EQ(r.version, v0 + 1);
	unsigned bound = CONVERGE_C * clog2(n);
	unsigned rounds = rounds_to_converge(net, 4 * bound);
	printf("  record change seen by all in %u rounds (bound %u)\n", rounds, bound);
	ASSERT_LE(rounds, bound);
	shoal_swim_member *v;
	size_t nv, found = 0;
	ASSERT_EQ(shoal_swim_view(sim_net_swim(net, 40), &v, &nv), SHOAL_OK);
	for (size_t j = 0; j < nv; j++) {
		if (shoal_peer_id_cmp(&v[j].id, sim_net_id(net, k)))
			continue;
		found++;
		ASSERT_U64_EQ(v[j].record.mem_weights, 123456789);
		ASSERT_EQ(v[j].record.n_links, 1);
		ASSERT_EQ(v[j].record.links[0].rtt_us, 250);
	}
	shoal_swim_view_free(v);
	ASSERT_EQ(found, 1);
	/* a record with a different id is refused */
	r.id.b[0] ^= 1;
	ASSERT_EQ(shoal_swim_set_record(sim_net_swim(net, k), &r, NULL, 0), SHOAL_ERR_INVAL);
	sim_net_free(net);
}

/* Dead entries are kept REAP_MULT (8) suspicion timeouts, then reaped, and
 * do not come back (no peer re-adds a dead stranger). N = 16: the timeout
 * is 4 x ceil(log2 17) = 20 rounds, so reaping is due ~160 rounds after. */
static void test_reap(void)
{
	const size_t n = 16, victim = 4;
	sim_net *net = make_net(12, n);
	ASSERT_TRUE(net != NULL);
	grow(net, n, 100000);
	ASSERT_LE(rounds_to_converge(net, 100), 100);
	sim_net_kill(net, victim);
	uint64_t period = sim_net_period_us(net);
	sim_net_run_until(net, sim_net_now(net) + 60 * period);
	ASSERT_EQ(sim_net_count_seen_as(net, victim, SHOAL_SWIM_STATE_DEAD), n - 1);
	sim_net_run_until(net, sim_net_now(net) + 8 * 20 * period);
	size_t known = 0;
	for (int r = 0; r < 200; r++) {
		sim_net_run_until(net, sim_net_now(net) + period);
		known = 0;
		for (size_t i = 0; i < n; i++) {
			shoal_swim_brief b;
			if (i != victim &&
			    !shoal_swim_lookup(sim_net_swim(net, i), sim_net_id(net, victim), &b))
				known++;
		}
		if (!known)
			break;
	}
	ASSERT_EQ(known, 0);
	/* and it stays gone through a few push-pull intervals */
	sim_net_run_until(net, sim_net_now(net) + 150 * period);
	for (size_t i = 0; i < n; i++) {
		shoal_swim_brief b;
		if (i != victim)
			ASSERT_EQ(
			    shoal_swim_lookup(sim_net_swim(net, i), sim_net_id(net, victim), &b),
			    SHOAL_ERR_NOTFOUND);
	}
	ASSERT_TRUE(sim_net_converged(net));
	sim_net_free(net);
}

/* A dead entry stays REAP_MULT suspicion timeouts at every survivor, never
 * less (invariant 4 of net/swim.c: a shorter life lets a stale alive bring
 * the peer back, and `shoal status` loses it). The setting of
 * tests/sh/mesh_loopback.sh: N = 4, base 50 ms (period 250 ms), one peer
 * killed, and a clock like the real node's: it moves while a tick runs
 * (1 us per read) and ticks come up to 2 ms late (millisecond poll
 * timeouts). 3 survivors, so the entry lives
 *   REAP_MULT 8 x SUSPECT_MULT 4 x ceil(log2(3 + 1)) 2 = 64 periods (16 s)
 * from the moment the survivor itself marked it dead. Polled every base
 * period, so "first seen dead" is at most one base after that moment; the
 * entry must still be there 64 periods - 1 base after it, and gone a few
 * periods later (reaping runs once a period). The old fault (a death
 * stamped after the tick's now, reaped in the same tick) hit ~4% of seeds
 * as "dropped before seen dead". 200 seeds, ~25 s of virtual time each. */
#define REAP_MULT 8 /* net/swim.c */
static void test_dead_kept_small_fast(void)
{
	const size_t n = 4, victim = 2;
	const uint64_t base = 50000, seeds = 200;
	uint64_t keep = (uint64_t)REAP_MULT * SUSPECT_MULT * log2n(n - 1) * 5 * base;
	uint64_t min_life = UINT64_MAX, max_life = 0;
	unsigned early = 0, never_dead = 0, kept_for_ever = 0;
	for (uint64_t seed = 1; seed <= seeds; seed++) {
		sim_net_config c;
		memset(&c, 0, sizeof c);
		c.seed = 100 + seed;
		c.lat_min_us = 50;
		c.lat_max_us = 500;
		c.clock_read_us = 1;
		c.tick_late_us = 2000;
		c.swim.base_us = (uint32_t)base;
		sim_net *net = sim_net_new(&c, n);
		ASSERT_TRUE(net != NULL);
		for (size_t i = 0; i < n; i++) {
			sim_net_run_until(net, sim_net_now(net) + 20000);
			sim_net_add(net, 1, i ? 0 : -1);
		}
		ASSERT_LE(rounds_to_converge(net, 40), 40);
		sim_net_kill(net, victim);
		uint64_t t_kill = sim_net_now(net), dead_at[4] = {0}, gone_at[4] = {0};
		/* detection takes ~4 s (tests/sh/mesh_loopback.sh); then the keep */
		uint64_t end = t_kill + 10000000 + keep + 20 * base;
		while (sim_net_now(net) < end) {
			sim_net_run_until(net, sim_net_now(net) + base);
			uint64_t t = sim_net_now(net);
			for (size_t i = 0; i < n; i++) {
				shoal_swim_brief b;
				if (i == victim || gone_at[i])
					continue;
				if (shoal_swim_lookup(sim_net_swim(net, i), sim_net_id(net, victim),
				                      &b)) {
					gone_at[i] = t;
					if (!dead_at[i])
						never_dead++;
					else if (t + base < dead_at[i] + keep)
						early++;
					if (dead_at[i] && t - dead_at[i] < min_life)
						min_life = t - dead_at[i];
					if (dead_at[i] && t - dead_at[i] > max_life)
						max_life = t - dead_at[i];
				} else if (b.state == SHOAL_SWIM_STATE_DEAD && !dead_at[i]) {
					dead_at[i] = t;
				}
			}
		}
		for (size_t i = 0; i < n; i++) {
			if (i != victim && !dead_at[i] && !gone_at[i])
				never_dead++; /* not even detected */
			if (i != victim && !gone_at[i])
				kept_for_ever++;
		}
		sim_net_free(net);
	}
	printf("  N=4, base 50 ms, %llu seeds: dead entry kept %.2f-%.2f s (want >= %.2f s), "
	       "%u dropped early, %u dropped before seen dead\n",
	       (unsigned long long)seeds, min_life == UINT64_MAX ? 0.0 : min_life / 1e6,
	       max_life / 1e6, (keep - base) / 1e6, early, never_dead);
	ASSERT_EQ(never_dead, 0);
	ASSERT_EQ(early, 0);
	ASSERT_EQ(kept_for_ever, 0); /* and reaped in the end */
	ASSERT_LE(max_life, keep + 4 * 5 * base);
}

/* Garbage into a live peer: dropped, counted, and a valid message after it
 * is still handled (a ping gets its ack). */
static uint64_t g_now;
static size_t g_sent;
static uint64_t g_now_us(void *c)
{
	return g_now;
}
static uint64_t g_rand(void *c)
{
	return rnd();
}
static shoal_err g_send(void *c, const char *ep, const uint8_t *b, size_t n)
{
	g_sent++;
	return SHOAL_OK;
}
static uint64_t g_inc;
static void g_inc_changed(void *c, uint64_t inc)
{
	g_inc = inc;
}

static size_t count_lines(FILE *f)
{
	size_t n = 0;
	int ch;
	rewind(f);
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	return n;
}

static void test_garbage_then_valid(void)
{
	static const shoal_swim_ops ops = {.now_us = g_now_us,
	                                   .rand64 = g_rand,
	                                   .send = g_send,
	                                   .incarnation_changed = g_inc_changed};
	shoal_record r;
	shoal_swim *sw;
	shoal_record_init(&r);
	r.id.b[0] = 1;
	strcpy(r.name, "me");
	strcpy(r.ctl_endpoint, "tcp://me:1");
	r.proto_version = r.sched_version = 1;
	ASSERT_EQ(shoal_swim_new(NULL, &r, 0, &ops, NULL, &sw, NULL, 0), SHOAL_OK);
	uint8_t junk[512];
	size_t bad = 0;
	/* the drop log goes to stderr: catch it to count its lines */
	FILE *log = tmpfile();
	ASSERT_TRUE(log != NULL);
	fflush(stderr);
	int saved = dup(2);
	dup2(fileno(log), 2);
	g_now = 1000000;
	for (int i = 0; i < 2000; i++) {
		size_t len = rnd() % sizeof junk;
		for (size_t j = 0; j < len; j++)
			junk[j] = (uint8_t)rnd();
		if (i % 3 == 0 && len)
			junk[0] = 0x80 | (junk[0] & 0x0f); /* looks like a map */
		bad += shoal_swim_receive(sw, "x", junk, len, NULL, 0) != SHOAL_OK;
	}
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	size_t lines = count_lines(log);
	fclose(log);
	printf("  2000 bad messages -> %zu log lines\n", lines);
	ASSERT_EQ(bad, 2000);
	ASSERT_GE(lines, 1);
	ASSERT_LE(lines, 20); /* rate-limited: 10 per 10 s of our clock */
	/* A valid ping from a stranger, with its alive update. */
	shoal_record other;
	shoal_wire_buf rb, mb;
	shoal_wire_update u;
	shoal_wire_msg m;
	shoal_record_init(&other);
	other.id.b[0] = 2;
	strcpy(other.name, "other");
	strcpy(other.ctl_endpoint, "tcp://other:1");
	other.proto_version = other.sched_version = 1;
	other.version = 1;
	shoal_wire_buf_init(&rb);
	shoal_wire_buf_init(&mb);
	ASSERT_EQ(shoal_wire_record_encode(&other, &rb), SHOAL_OK);
	memset(&u, 0, sizeof u);
	u.id = other.id;
	u.state = SHOAL_SWIM_STATE_ALIVE;
	u.incarnation = 1;
	u.record_version = 1;
	u.record = rb.data;
	u.record_len = rb.len;
	memset(&m, 0, sizeof m);
	m.type = SHOAL_WIRE_PING;
	m.from = other.id;
	strcpy(m.from_ep, other.ctl_endpoint);
	m.seq = 77;
	m.target = r.id;
	m.updates = &u;
	m.n_updates = 1;
	ASSERT_EQ(shoal_wire_encode(&m, &mb), SHOAL_OK);
	size_t sent0 = g_sent;
	ASSERT_EQ(shoal_swim_receive(sw, NULL, mb.data, mb.len, NULL, 0), SHOAL_OK);
	ASSERT_EQ(g_sent, sent0 + 1); /* the ack */
	shoal_swim_brief b;
	ASSERT_EQ(shoal_swim_lookup(sw, &other.id, &b), SHOAL_OK);
	ASSERT_EQ(b.state, SHOAL_SWIM_STATE_ALIVE);
	shoal_swim_stats st;
	shoal_swim_get_stats(sw, &st);
	ASSERT_EQ(st.msgs_bad, 2000);
	/* Someone says we are suspect at our incarnation: we refute (+1) and
	 * tell the node, which persists it. */
	memset(&u, 0, sizeof u);
	u.id = r.id;
	u.state = SHOAL_SWIM_STATE_SUSPECT;
	u.incarnation = shoal_swim_incarnation(sw);
	m.seq = 78;
	ASSERT_EQ(shoal_wire_encode(&m, &mb), SHOAL_OK);
	ASSERT_EQ(shoal_swim_receive(sw, NULL, mb.data, mb.len, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_swim_incarnation(sw), 1);
	ASSERT_U64_EQ(g_inc, 1);
	shoal_wire_buf_fini(&rb);
	shoal_wire_buf_fini(&mb);
	shoal_swim_free(sw);
}

TEST_MAIN(TEST_CASE(test_garbage_then_valid), TEST_CASE(test_converge_16),
          TEST_CASE(test_converge_64), TEST_CASE(test_converge_256),
          TEST_CASE(test_loss_no_false_death), TEST_CASE(test_kill_detected),
          TEST_CASE(test_suspect_refutes), TEST_CASE(test_partition_heals), TEST_CASE(test_leave),
          TEST_CASE(test_leave_small_lossy), TEST_CASE(test_restart_persisted),
          TEST_CASE(test_restart_forgotten), TEST_CASE(test_incompatible),
          TEST_CASE(test_record_update), TEST_CASE(test_reap), TEST_CASE(test_dead_kept_small_fast))
