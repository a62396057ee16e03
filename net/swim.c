/*
 * net/swim.c: SWIM membership with Lifeguard-style refinements (see
 * net/swim.h for the API and DESIGN.md section 3 for its place).
 *
 * Divisions, in order:
 *   - timing and size constants (each derived)
 *   - the member table (sorted by id) and the probe list
 *   - the piggyback queue (updates, by fewest transmissions first)
 *   - sending
 *   - applying updates (the state machine below)
 *   - message handlers
 *   - tick: probes, suspicion timeouts, reaping, push-pull, joins
 *   - lifecycle, view, statistics
 *
 * Protocol invariants:
 *   1. A member's entry is ordered by (incarnation, rank(state)) with rank
 *      alive < suspect < dead < left; an update replaces an entry only if
 *      it is strictly greater, or if both are alive at the same
 *      incarnation and its record version is higher (a record change).
 *   2. Only the member itself raises its incarnation: to refute suspect,
 *      dead or left about itself (unless it is leaving), to out-rank a ghost
 *      of an earlier life (alive at a higher incarnation), and to leave.
 *   3. Every alive update carries the member's record (encoded), whose
 *      version equals the update's record version and whose id equals the
 *      update's id; anything else is dropped.
 *   4. Dead and left entries are kept for REAP_MULT suspicion timeouts, so a
 *      stale alive(i) still in flight cannot resurrect them; then reaped.
 *      An unknown member is only ever added alive or suspect.
 *   5. Peers learned through a push-pull are not re-gossiped (the sender
 *      already has them), except the sender itself.
 *
 * Member states as seen by one peer:
 *
 *        alive(i) ----probe fails / suspect(>=i)----> suspect(i)
 *          ^  ^                                          |
 *          |  +-------alive(>i) (refutation)-------------+
 *          |                                             | timeout / dead(>=i)
 *          +-----alive(>j) (restart)-- dead(j) <---------+
 *          +-----alive(>j) (restart)-- left(j) <---- left(>=i) from any state
 *                                         \__ reaped after REAP_MULT timeouts
 *
 *   transition                  function
 *   alive   -> suspect          probe_finish() / apply_update()
 *   suspect -> alive            apply_update() (refutation)
 *   suspect -> dead             check_timers() / apply_update()
 *   any     -> left             apply_update() / shoal_swim_leave() for self
 *   dead|left -> alive          apply_update() (restart at higher incarnation)
 *   dead|left -> (gone)         check_timers() (reap)
 */
#include "net/swim.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "net/fault.h"
#include "net/wire.h"

/* ==== timing and size constants ========================================= */

/* BASE: the base period (100 ms). A home-lab LAN answers a ping in < 1 ms,
 * Wi-Fi with power saving in up to ~100 ms; one base period is the smallest
 * wait that covers both. */
#define BASE_US_DEFAULT 100000u
/* ACK_MULT: direct ack wait = 2 base = 200 ms, twice the slow Wi-Fi RTT. */
#define ACK_MULT 2u
/* PROBE_MULT: protocol period = 5 base = 500 ms. After the 200 ms direct
 * wait the indirect probe has 300 ms for its 4 hops (3 x the slow RTT);
 * two probes per second per peer is ~2 small messages/s -- nothing. */
#define PROBE_MULT 5u
/* INDIRECT_K: ping-req fan-out. With per-message loss p an indirect path
 * (4 messages) fails with 1-(1-p)^4; with p = 10% that is 0.34, and all
 * three paths fail with 0.34^3 = 0.04: a live peer is suspected after
 * 0.19 (direct) x 0.04 = 0.8% of its probes, and refutes each in O(log N). */
#define INDIRECT_K_DEFAULT 3u
/* SUSPECT_MULT: suspicion timeout = 4 x ceil(log2(N+1)) protocol periods.
 * A refutation needs the suspicion to reach the suspect and its alive to
 * come back: two disseminations of ~ceil(log2 N) rounds each (measured
 * constant <= 2 with the buddy system, see tests/bench/swim_sim.c), so 4
 * leaves a factor of 1.0 headroom for loss. memberlist uses 4 x log10(N);
 * we use log2, more patient, since false deaths cost a re-plan. */
#define SUSPECT_MULT_DEFAULT 4u
/* RETRANSMIT_MULT: each update is piggybacked 2 x ceil(log2(N+1)) times
 * by every peer that holds it. A peer misses an update that N holders each
 * pushed L times to ~random peers with probability ~exp(-L) =
 * (N+1)^(-2/ln 2) = (N+1)^-2.9, so all N peers get it w.p. >= 1 - N^-1.9;
 * the periodic push-pull repairs the rest. */
#define RETRANSMIT_MULT_DEFAULT 2u
/* PUSHPULL_MULT: a full state exchange with one random peer every 60
 * periods (30 s, as memberlist's default): anti-entropy for what gossip
 * missed, at a cost of one view per peer per 30 s. */
#define PUSHPULL_MULT_DEFAULT 60u
/* BOOT_PUSHPULLS / BOOT_PP_MULT: after start, 3 extra full state exchanges
 * with random peers, 2, 4 and 8 periods apart. A peer that joins in a burst
 * of joins gets a seed's view that misses the peers joining at the same
 * moment, whose alive updates may already be spent (their retransmit
 * limit was computed for the small N of that moment); the push-pull at
 * 30 s would fix it, these fix it in seconds and re-announce us (an
 * update about the sender is re-gossiped). Cost: 3 views per start. */
#define BOOT_PUSHPULLS 3u
/* DEAD_PP_MULT: a full state exchange with one random dead member every 4
 * periods (2 s) while there are any (until they are reaped): a dead peer
 * that is in fact alive, across a healed partition, refutes and is back
 * in a few exchanges. Cost: one view per 2 s while someone is dead. */
#define DEAD_PP_MULT 4u
#define BOOT_PP_MULT 2u
/* JOIN_RETRY_MULT / JOIN_TRIES: re-send a join every 2 periods (1 s), up
 * to 60 times (a minute), for seeds that are still starting. */
#define JOIN_RETRY_MULT 2u
#define JOIN_TRIES      60u
#define JOINS_MAX       16u
/* REAP_MULT: dead/left entries live 8 suspicion timeouts. An update stops
 * being piggybacked after L/2 ~ ceil(log2 N) periods (about 2 sends per
 * period), far below one suspicion timeout (4 ceil(log2 N)); 8 covers a
 * peer that heard of the death late and still gossips, and keeps the
 * entry in `shoal status` for a while (~2.5 min at N = 64). */
#define REAP_MULT 8u
/* LEAVE_LINGER_MULT: after leaving, keep ticking 2 x ceil(log2(N+1))
 * periods: the left update is in every piggyback meanwhile and reaches
 * everyone in ~ceil(log2 N) rounds. */
#define LEAVE_LINGER_MULT 2u
/* LEAVE_TELL_MAX: a leaver tells up to this many live peers directly (all
 * of a small cluster, distinct ones), at once and again every period of the
 * linger: piggybacks alone reach a peer of a small cluster only through a
 * few probes, and one lost message meant a false death later. */
#define LEAVE_TELL_MAX 8u
/* Piggyback bounds: at most 32 updates and 16 KiB per probe message. A
 * join storm of N peers needs N updates at every peer; ~2 messages/period
 * x 32 updates absorbs 64 new peers per period, so even N = 1024 joining at
 * once is bandwidth-bound for only ~16 periods. 16 KiB keeps a probe one
 * small ZeroMQ frame even with real ~2 KiB records (8 of them). */
#define PIGGY_MAX       32u
#define PIGGY_BYTES     (16u << 10)
#define UPDATE_OVERHEAD 48u /* map header + keys + id + three integers */
/* Relayed probes in flight (ping-req): each peer relays ~K of them per
 * period; 64 slots cover bursts, and a stale slot is simply reused. */
#define RELAY_SLOTS 64u
/* Bad-message log: at most 10 lines per 100 base periods (10 s). */
#define BADLOG_BURST       10u
#define BADLOG_WINDOW_MULT 100u

/* ==== types ============================================================== */

struct member {
	shoal_peer_id id;
	shoal_swim_state state;
	uint64_t inc, rv;
	uint8_t *rec; /* encoded record (net/wire.h), malloc'd */
	size_t rec_len;
	char ep[SHOAL_RECORD_EP_MAX];
	uint64_t since_us;
	uint64_t suspect_deadline_us;
	uint64_t bgen; /* generation of its latest queued update (0: none) */
	int compatible;
	char why[SHOAL_SWIM_WHY_MAX];
	int in_probe;
};

struct bcast {
	shoal_peer_id id;
	uint64_t gen;
};

struct bqueue {
	struct bcast *v;
	size_t n, cap;
};

struct relay {
	uint64_t our_seq, their_seq, expires_us;
	shoal_peer_id target;
	char origin_ep[SHOAL_RECORD_EP_MAX];
	int used;
};

struct join {
	char ep[SHOAL_RECORD_EP_MAX];
	uint64_t next_us;
	unsigned tries;
	int used;
};

struct shoal_swim {
	shoal_swim_config cfg;
	const shoal_swim_ops *ops;
	void *ctx;
	uint64_t period_us;

	struct member **m; /* sorted by id */
	size_t n, cap;
	struct member *self;
	shoal_record self_rec;
	size_t n_live;    /* alive + suspect, self included */
	size_t n_suspect; /* suspect entries */
	int leaving;
	uint64_t next_tell_us; /* leaving: when to tell the live peers again */

	struct member **probe; /* round-robin order */
	size_t probe_n, probe_cap, probe_i;
	struct {
		int active, acked, indirect_sent;
		uint64_t seq, t_indirect, t_end;
		shoal_peer_id target;
		uint64_t target_inc;
	} pr;
	uint64_t next_probe_us, next_pushpull_us, next_reap_us;
	uint64_t next_dead_pp_us; /* the next exchange with a dead member */
	unsigned boot_pp;         /* boot push-pulls done */
	uint64_t seq;

	struct bqueue *bq; /* bq[t]: updates sent t times */
	size_t n_bq;
	uint64_t bgen;

	struct relay relays[RELAY_SLOTS];
	struct join joins[JOINS_MAX];

	shoal_wire_buf out, recbuf;
	shoal_wire_update *in_up, *out_up; /* SHOAL_WIRE_MAX_UPDATES each */
	shoal_record scratch;

	uint64_t badlog_window_us;
	unsigned badlog_n, badlog_suppressed;
	shoal_swim_stats st;
};

const char *shoal_swim_state_name(shoal_swim_state s)
{
	static const char *names[] = {"alive", "suspect", "dead", "left"};
	return (unsigned)s < SHOAL_SWIM_STATE__COUNT ? names[s] : "unknown";
}

void shoal_swim_config_default(shoal_swim_config *c)
{
	c->base_us = BASE_US_DEFAULT;
	c->indirect_k = INDIRECT_K_DEFAULT;
	c->suspect_mult = SUSPECT_MULT_DEFAULT;
	c->retransmit_mult = RETRANSMIT_MULT_DEFAULT;
	c->pushpull_mult = PUSHPULL_MULT_DEFAULT;
}

static uint64_t now_us(const shoal_swim *sw)
{
	return sw->ops->now_us(sw->ctx);
}

static uint64_t rnd(shoal_swim *sw, uint64_t n)
{
	return n ? sw->ops->rand64(sw->ctx) % n : 0;
}

/* ceil(log2(n + 1)): 1 for n = 1, 4 for n = 8..15, 9 for n = 256..511. */
static unsigned log2n(size_t n)
{
	unsigned k = 0;
	while (k < 63 && ((uint64_t)1 << k) < (uint64_t)n + 1)
		k++;
	return k ? k : 1;
}

static uint64_t suspect_timeout_us(const shoal_swim *sw)
{
	return (uint64_t)sw->cfg.suspect_mult * log2n(sw->n_live) * sw->period_us;
}

static unsigned retransmit_limit(const shoal_swim *sw)
{
	return sw->cfg.retransmit_mult * log2n(sw->n_live);
}

static void bad(shoal_swim *sw, const char *what, const char *why)
{
	uint64_t now = now_us(sw);
	sw->st.msgs_bad++;
	if (now >= sw->badlog_window_us) {
		if (sw->badlog_suppressed)
			SHOAL_LOG_W("swim", "%u more bad messages not logged",
			            sw->badlog_suppressed);
		sw->badlog_window_us = now + (uint64_t)BADLOG_WINDOW_MULT * sw->cfg.base_us;
		sw->badlog_n = 0;
		sw->badlog_suppressed = 0;
	}
	if (sw->badlog_n < BADLOG_BURST) {
		sw->badlog_n++;
		SHOAL_LOG_W("swim", "%s dropped: %s", what, why);
	} else {
		sw->badlog_suppressed++;
	}
}

/* ==== the member table and the probe list ================================ */

/* Index of id, or -(insertion point) - 1. */
static long find_idx(const shoal_swim *sw, const shoal_peer_id *id)
{
	size_t lo = 0, hi = sw->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = shoal_peer_id_cmp(&sw->m[mid]->id, id);
		if (c == 0)
			return (long)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -(long)lo - 1;
}

static struct member *find(const shoal_swim *sw, const shoal_peer_id *id)
{
	long i = find_idx(sw, id);
	return i >= 0 ? sw->m[i] : NULL;
}

static int live(shoal_swim_state s)
{
	return s == SHOAL_SWIM_STATE_ALIVE || s == SHOAL_SWIM_STATE_SUSPECT;
}

static int probe_insert(shoal_swim *sw, struct member *m)
{
	if (sw->probe_n == sw->probe_cap) {
		size_t cap = sw->probe_cap ? 2 * sw->probe_cap : 16;
		struct member **p = realloc(sw->probe, cap * sizeof *p);
		if (!p)
			return -1;
		sw->probe = p;
		sw->probe_cap = cap;
	}
	/* A random place not yet passed in this round, so it is probed soon
	 * but does not always jump the queue. */
	size_t at = sw->probe_i + (size_t)rnd(sw, sw->probe_n - sw->probe_i + 1);
	memmove(&sw->probe[at + 1], &sw->probe[at], (sw->probe_n - at) * sizeof *sw->probe);
	sw->probe[at] = m;
	sw->probe_n++;
	m->in_probe = 1;
	return 0;
}

/* Remove every occurrence (a member dropped lazily and re-added may be in
 * the list twice). O(N), only on reap. */
static void probe_remove(shoal_swim *sw, struct member *m)
{
	size_t j = 0, before = sw->probe_i;
	for (size_t i = 0; i < sw->probe_n; i++) {
		if (sw->probe[i] == m) {
			if (i < before)
				sw->probe_i--;
			continue;
		}
		sw->probe[j++] = sw->probe[i];
	}
	sw->probe_n = j;
	m->in_probe = 0;
}

/* Start a new round: every live member but us, Fisher-Yates shuffled. */
static void probe_rebuild(shoal_swim *sw)
{
	sw->probe_n = 0;
	sw->probe_i = 0;
	for (size_t i = 0; i < sw->n; i++)
		sw->m[i]->in_probe = 0;
	if (sw->probe_cap < sw->n) {
		struct member **p = realloc(sw->probe, sw->n * sizeof *p);
		if (!p)
			return;
		sw->probe = p;
		sw->probe_cap = sw->n;
	}
	for (size_t i = 0; i < sw->n; i++) {
		struct member *m = sw->m[i];
		if (m != sw->self && live(m->state)) {
			sw->probe[sw->probe_n++] = m;
			m->in_probe = 1;
		}
	}
	for (size_t i = sw->probe_n; i > 1; i--) {
		size_t j = (size_t)rnd(sw, i);
		struct member *t = sw->probe[i - 1];
		sw->probe[i - 1] = sw->probe[j];
		sw->probe[j] = t;
	}
}

static void check_compat(shoal_swim *sw, struct member *m, const shoal_record *r)
{
	const shoal_record *me = &sw->self_rec;
	m->compatible = 0;
	if (r->proto_version != me->proto_version)
		snprintf(m->why, sizeof m->why, "protocol v%u, ours v%u", r->proto_version,
		         me->proto_version);
	else if (r->sched_version != me->sched_version)
		snprintf(m->why, sizeof m->why, "scheduler v%u, ours v%u", r->sched_version,
		         me->sched_version);
	else if (strcmp(r->cluster, me->cluster))
		snprintf(m->why, sizeof m->why, "cluster \"%.*s\", ours \"%.*s\"",
		         SHOAL_WHY_QUOTE(sizeof m->why, 24) / 2, r->cluster,
		         SHOAL_WHY_QUOTE(sizeof m->why, 24) / 2, me->cluster);
	else
		m->compatible = 1, m->why[0] = 0;
}

/* Take ownership of a copy of rec[len] as m's record (already validated as r). */
static int member_set_record(shoal_swim *sw, struct member *m, const uint8_t *rec, size_t len,
                             const shoal_record *r)
{
	uint8_t *copy = malloc(len);
	if (!copy)
		return -1;
	memcpy(copy, rec, len);
	free(m->rec);
	m->rec = copy;
	m->rec_len = len;
	m->rv = r->version;
	shoal_record_strcpy(m->ep, sizeof m->ep, r->ctl_endpoint);
	check_compat(sw, m, r);
	return 0;
}

static struct member *member_add(shoal_swim *sw, const shoal_peer_id *id)
{
	long i = find_idx(sw, id);
	if (i >= 0)
		return sw->m[i];
	size_t at = (size_t)(-i - 1);
	if (sw->n == sw->cap) {
		size_t cap = sw->cap ? 2 * sw->cap : 16;
		struct member **p = realloc(sw->m, cap * sizeof *p);
		if (!p)
			return NULL;
		sw->m = p;
		sw->cap = cap;
	}
	struct member *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	m->id = *id;
	m->state = SHOAL_SWIM_STATE_DEAD; /* until set_state; not counted live */
	memmove(&sw->m[at + 1], &sw->m[at], (sw->n - at) * sizeof *sw->m);
	sw->m[at] = m;
	sw->n++;
	return m;
}

static void member_reap(shoal_swim *sw, size_t i)
{
	struct member *m = sw->m[i];
	probe_remove(sw, m);
	memmove(&sw->m[i], &sw->m[i + 1], (sw->n - i - 1) * sizeof *sw->m);
	sw->n--;
	free(m->rec);
	free(m);
}

static void fill_member(const shoal_swim *sw, const struct member *m, shoal_swim_member *out)
{
	memset(out, 0, sizeof *out);
	out->id = m->id;
	out->state = m->state;
	out->incarnation = m->inc;
	out->state_since_us = m->since_us;
	out->is_self = m == sw->self;
	out->compatible = m->compatible;
	memcpy(out->why_incompatible, m->why, sizeof out->why_incompatible);
	if (m == sw->self)
		out->record = sw->self_rec;
	else if (shoal_wire_record_decode(m->rec, m->rec_len, &out->record, NULL, 0))
		shoal_record_init(&out->record); /* cannot happen: validated on receipt */
}

static void notify(shoal_swim *sw, struct member *m, shoal_swim_state old, int is_new)
{
	if (!sw->ops->member_changed)
		return;
	shoal_swim_member *v = malloc(sizeof *v);
	if (!v)
		return;
	fill_member(sw, m, v);
	sw->ops->member_changed(sw->ctx, v, old, is_new);
	free(v);
}

/* ==== the piggyback queue ================================================ */

static int bq_push(shoal_swim *sw, size_t t, const shoal_peer_id *id, uint64_t gen)
{
	struct bqueue *q = &sw->bq[t];
	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 16;
		struct bcast *v = realloc(q->v, cap * sizeof *v);
		if (!v)
			return -1;
		q->v = v;
		q->cap = cap;
	}
	q->v[q->n].id = *id;
	q->v[q->n].gen = gen;
	q->n++;
	return 0;
}

/* Gossip m's current state afresh (replaces any older queued update). */
static void queue_update(shoal_swim *sw, struct member *m)
{
	m->bgen = ++sw->bgen;
	bq_push(sw, 0, &m->id, m->bgen);
}

static void update_of(const shoal_swim *sw, const struct member *m, shoal_wire_update *u,
                      int with_record)
{
	u->id = m->id;
	u->state = m->state;
	u->incarnation = m->inc;
	u->record_version = m->rv;
	u->record = with_record ? m->rec : NULL;
	u->record_len = with_record ? m->rec_len : 0;
}

static size_t update_cost(const shoal_wire_update *u)
{
	return UPDATE_OVERHEAD + u->record_len;
}

/* Fill sw->out_up with up to PIGGY_MAX updates (PIGGY_BYTES), fewest
 * transmissions first, newest first within a count; `first` (may be NULL)
 * goes in front (the buddy system: tell a suspect it is suspected). */
static size_t piggyback(shoal_swim *sw, const struct member *first)
{
	size_t n = 0, bytes = 0;
	unsigned limit = retransmit_limit(sw);
	struct bcast moved[PIGGY_MAX];
	size_t moved_t[PIGGY_MAX], n_moved = 0;
	if (first) {
		update_of(sw, first, &sw->out_up[n], first->state == SHOAL_SWIM_STATE_ALIVE);
		bytes += update_cost(&sw->out_up[n++]);
	}
	for (size_t t = 0; t < sw->n_bq && n < PIGGY_MAX; t++) {
		struct bqueue *q = &sw->bq[t];
		while (q->n && n < PIGGY_MAX) {
			struct bcast b = q->v[q->n - 1];
			struct member *m = find(sw, &b.id);
			if (!m || m->bgen != b.gen || t >= limit) {
				q->n--; /* stale, reaped, or sent enough */
				continue;
			}
			if (m == first) { /* already in front: counts as sent */
				q->n--;
				moved[n_moved] = b;
				moved_t[n_moved++] = t + 1;
				continue;
			}
			shoal_wire_update *u = &sw->out_up[n];
			update_of(sw, m, u, m->state == SHOAL_SWIM_STATE_ALIVE);
			if (bytes + update_cost(u) > PIGGY_BYTES && n > 0)
				goto done;
			bytes += update_cost(u);
			n++;
			q->n--;
			moved[n_moved] = b;
			moved_t[n_moved++] = t + 1;
		}
	}
done:
	for (size_t i = 0; i < n_moved; i++)
		if (moved_t[i] < limit && moved_t[i] < sw->n_bq)
			bq_push(sw, moved_t[i], &moved[i].id, moved[i].gen);
	return n;
}

/* ==== sending ============================================================ */

static void send_msg(shoal_swim *sw, const char *ep, shoal_wire_msg *msg)
{
	msg->from = sw->self->id;
	shoal_record_strcpy(msg->from_ep, sizeof msg->from_ep, sw->self_rec.ctl_endpoint);
	if (shoal_wire_encode(msg, &sw->out))
		return;
	sw->st.msgs_sent++;
	sw->st.bytes_sent += sw->out.len;
	const void *data = sw->out.data;
	size_t len = sw->out.len;
	void *copy;
	if (!shoal_fault_message("swim", NULL, &data, &len, &copy)) /* test hook: net/fault.h */
		sw->ops->send(sw->ctx, ep, data, len);
	free(copy);
}

/* A probe-family message with piggybacked updates. */
static void send_probe_msg(shoal_swim *sw, const char *ep, uint32_t type, uint64_t seq,
                           const shoal_peer_id *target, const char *target_ep,
                           const struct member *first)
{
	shoal_wire_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.type = type;
	msg.seq = seq;
	msg.target = *target;
	if (target_ep)
		shoal_record_strcpy(msg.target_ep, sizeof msg.target_ep, target_ep);
	msg.updates = sw->out_up;
	msg.n_updates = piggyback(sw, first);
	send_msg(sw, ep, &msg);
}

/* Our whole view, every entry with its record. */
static void send_pushpull(shoal_swim *sw, const char *ep, int reply)
{
	shoal_wire_msg msg;
	memset(&msg, 0, sizeof msg);
	msg.type = SHOAL_WIRE_PUSHPULL;
	msg.reply = (uint32_t)reply;
	msg.updates = sw->out_up;
	/* Stay under what a receiver accepts (SHOAL_WIRE_MAX_MSG, less 64 KiB
	 * for the header): a huge cluster of full records sends part of its
	 * view, and gossip and the next push-pull bring the rest. */
	size_t bytes = 0, budget = SHOAL_WIRE_MAX_MSG - (64u << 10);
	size_t start = (size_t)rnd(sw, sw->n); /* a different part each time */
	update_of(sw, sw->self, &sw->out_up[msg.n_updates++], 1);
	bytes += update_cost(&sw->out_up[0]);
	for (size_t k = 0; k < sw->n && msg.n_updates < SHOAL_WIRE_MAX_UPDATES; k++) {
		const struct member *m = sw->m[(start + k) % sw->n];
		shoal_wire_update *u = &sw->out_up[msg.n_updates];
		if (m == sw->self)
			continue;
		update_of(sw, m, u, 1);
		if (bytes + update_cost(u) > budget)
			break;
		bytes += update_cost(u);
		msg.n_updates++;
	}
	sw->st.pushpulls++;
	send_msg(sw, ep, &msg);
}

/* ==== applying updates =================================================== */

static int rank(shoal_swim_state s)
{
	return (int)s; /* alive 0 < suspect 1 < dead 2 < left 3 */
}

static void set_state(shoal_swim *sw, struct member *m, shoal_swim_state st, uint64_t inc)
{
	shoal_swim_state old = m->state;
	int was_live = live(old), is_live = live(st);
	m->inc = inc;
	if (st == SHOAL_SWIM_STATE_SUSPECT)
		m->suspect_deadline_us = now_us(sw) + suspect_timeout_us(sw);
	if (old == st)
		return;
	m->state = st;
	m->since_us = now_us(sw);
	sw->n_live += (size_t)is_live - (size_t)was_live;
	sw->n_suspect +=
	    (size_t)(st == SHOAL_SWIM_STATE_SUSPECT) - (size_t)(old == SHOAL_SWIM_STATE_SUSPECT);
	if (is_live && !m->in_probe && m != sw->self)
		probe_insert(sw, m);
	/* A member that stops being live stays in the probe list until its
	 * turn, where it is skipped (cheaper than an O(N) removal here). */
}

/* Raise our incarnation above `above` and gossip that we are alive. */
static void refute(shoal_swim *sw, uint64_t above)
{
	struct member *me = sw->self;
	/* saturates: at SHOAL_WIRE_INC_MAX it stays (never wraps to 0) */
	me->inc = above < SHOAL_WIRE_INC_MAX ? above + 1 : SHOAL_WIRE_INC_MAX;
	sw->st.refutations++;
	queue_update(sw, me);
	if (sw->ops->incarnation_changed)
		sw->ops->incarnation_changed(sw->ctx, me->inc);
}

/* Apply one update; `gossip`: re-gossip it if it changed our view. */
static void apply_update(shoal_swim *sw, const shoal_wire_update *u, int gossip)
{
	char why[SHOAL_WHY_LEN];
	if (u->state >= SHOAL_SWIM_STATE__COUNT) {
		bad(sw, "update", "unknown member state");
		return;
	}
	if (!shoal_peer_id_cmp(&u->id, &sw->self->id)) {
		struct member *me = sw->self;
		if (sw->leaving)
			return;
		if ((u->state != SHOAL_SWIM_STATE_ALIVE && u->incarnation >= me->inc) ||
		    (u->state == SHOAL_SWIM_STATE_ALIVE && u->incarnation > me->inc))
			refute(sw, u->incarnation);
		return;
	}
	struct member *m = find(sw, &u->id);
	int is_new = m == NULL;
	int newer = 0, rec_newer = 0;
	if (m) {
		newer = u->incarnation > m->inc ||
		        (u->incarnation == m->inc && rank(u->state) > rank(m->state));
		rec_newer = u->state == SHOAL_SWIM_STATE_ALIVE &&
		            m->state == SHOAL_SWIM_STATE_ALIVE && u->incarnation == m->inc &&
		            u->record_version > m->rv;
		if (!newer && !rec_newer)
			return;
	} else if (!u->record || !live((shoal_swim_state)u->state)) {
		/* Never add a dead or left stranger: two peers that reap at
		 * slightly different times would hand the tombstone back and
		 * forth in push-pulls for ever. */
		return;
	}
	if (u->state == SHOAL_SWIM_STATE_ALIVE && !u->record) {
		bad(sw, "update", "alive without its record");
		return;
	}
	int take_record = u->record && (!m || u->record_version != m->rv || newer);
	if (take_record) {
		if (shoal_wire_record_decode(u->record, u->record_len, &sw->scratch, why,
		                             sizeof why)) {
			bad(sw, "record", why);
			return;
		}
		if (shoal_peer_id_cmp(&sw->scratch.id, &u->id) ||
		    sw->scratch.version != u->record_version) {
			bad(sw, "record", "id or version differs from its update");
			return;
		}
		if (!m && !(m = member_add(sw, &u->id)))
			return;
		if (member_set_record(sw, m, u->record, u->record_len, &sw->scratch))
			return;
	}
	shoal_swim_state old = is_new ? SHOAL_SWIM_STATE__COUNT : m->state;
	if (is_new)
		m->state = SHOAL_SWIM_STATE_DEAD, m->since_us = now_us(sw);
	set_state(sw, m, (shoal_swim_state)u->state, u->incarnation);
	if (gossip)
		queue_update(sw, m);
	if (is_new || old != m->state)
		notify(sw, m, old == SHOAL_SWIM_STATE__COUNT ? m->state : old, is_new);
}

/* We think m failed a probe: suspect it at the incarnation we know. */
static void suspect(shoal_swim *sw, struct member *m)
{
	if (m->state != SHOAL_SWIM_STATE_ALIVE)
		return;
	sw->st.suspicions++;
	set_state(sw, m, SHOAL_SWIM_STATE_SUSPECT, m->inc);
	queue_update(sw, m);
	notify(sw, m, SHOAL_SWIM_STATE_ALIVE, 0);
}

shoal_err shoal_swim_declare_dead(shoal_swim *sw, const shoal_peer_id *id, uint64_t incarnation)
{
	struct member *m = find(sw, id);
	if (!m || m == sw->self)
		return SHOAL_ERR_NOTFOUND;
	if (!live(m->state) || m->inc != incarnation)
		return SHOAL_ERR_STATE; /* already known, or it came back since */
	shoal_swim_state old = m->state;
	set_state(sw, m, SHOAL_SWIM_STATE_DEAD, m->inc);
	queue_update(sw, m);
	notify(sw, m, old, 0);
	return SHOAL_OK;
}

/* ==== message handlers ==================================================== */

static const char *reply_ep(const char *from, const shoal_wire_msg *msg)
{
	return from && from[0] ? from : msg->from_ep;
}

static void apply_all(shoal_swim *sw, const shoal_wire_msg *msg, int gossip)
{
	for (size_t i = 0; i < msg->n_updates; i++) {
		int about_sender = !shoal_peer_id_cmp(&msg->updates[i].id, &msg->from);
		apply_update(sw, &msg->updates[i], gossip || about_sender);
	}
}

/* If the sender is wrong about itself in our eyes (suspect, dead), tell it
 * first thing in the reply so it can refute. */
static const struct member *buddy(shoal_swim *sw, const shoal_peer_id *id)
{
	const struct member *m = find(sw, id);
	return m && m->state != SHOAL_SWIM_STATE_ALIVE ? m : NULL;
}

static void on_ping(shoal_swim *sw, const char *from, const shoal_wire_msg *msg)
{
	apply_all(sw, msg, 1);
	/* A ping meant for another id (our endpoint was someone else's) gets
	 * no ack: the prober must not think that peer alive. */
	if (shoal_peer_id_cmp(&msg->target, &sw->self->id))
		return;
	send_probe_msg(sw, reply_ep(from, msg), SHOAL_WIRE_ACK, msg->seq, &sw->self->id, NULL,
	               buddy(sw, &msg->from));
}

static void on_ack(shoal_swim *sw, const shoal_wire_msg *msg)
{
	apply_all(sw, msg, 1);
	if (sw->pr.active && msg->seq == sw->pr.seq &&
	    !shoal_peer_id_cmp(&msg->target, &sw->pr.target)) {
		sw->pr.acked = 1;
		return;
	}
	for (size_t i = 0; i < RELAY_SLOTS; i++) {
		struct relay *r = &sw->relays[i];
		if (!r->used || r->our_seq != msg->seq ||
		    shoal_peer_id_cmp(&r->target, &msg->target))
			continue;
		r->used = 0;
		if (now_us(sw) <= r->expires_us)
			send_probe_msg(sw, r->origin_ep, SHOAL_WIRE_ACK, r->their_seq, &r->target,
			               NULL, NULL);
		return;
	}
}

static void on_ping_req(shoal_swim *sw, const char *from, const shoal_wire_msg *msg)
{
	apply_all(sw, msg, 1);
	uint64_t now = now_us(sw);
	struct relay *r = NULL;
	for (size_t i = 0; i < RELAY_SLOTS && !r; i++)
		if (!sw->relays[i].used || sw->relays[i].expires_us < now)
			r = &sw->relays[i];
	if (!r)
		r = &sw->relays[rnd(sw, RELAY_SLOTS)];
	r->used = 1;
	r->our_seq = ++sw->seq;
	r->their_seq = msg->seq;
	r->target = msg->target;
	r->expires_us = now + sw->period_us;
	shoal_record_strcpy(r->origin_ep, sizeof r->origin_ep, reply_ep(from, msg));
	send_probe_msg(sw, msg->target_ep, SHOAL_WIRE_PING, r->our_seq, &msg->target, NULL,
	               buddy(sw, &msg->target));
}

static void join_done(shoal_swim *sw, const char *ep)
{
	for (size_t i = 0; i < JOINS_MAX; i++)
		if (sw->joins[i].used && ep && !strcmp(sw->joins[i].ep, ep))
			sw->joins[i].used = 0;
}

static void on_pushpull(shoal_swim *sw, const char *from, const shoal_wire_msg *msg)
{
	apply_all(sw, msg, 0);
	join_done(sw, from);
	join_done(sw, msg->from_ep);
	if (msg->reply)
		send_pushpull(sw, reply_ep(from, msg), 0);
}

shoal_err shoal_swim_receive(shoal_swim *sw, const char *from, const uint8_t *buf, size_t len,
                             char *why, size_t why_len)
{
	char reason[SHOAL_WHY_LEN];
	shoal_wire_msg *msg = &(shoal_wire_msg){.updates = sw->in_up};
	sw->st.msgs_recv++;
	sw->st.bytes_recv += len;
	shoal_err e =
	    shoal_wire_decode(buf, len, msg, SHOAL_WIRE_MAX_UPDATES, reason, sizeof reason);
	if (e) {
		bad(sw, "message", reason);
		return shoal_why(why, why_len, e, "%s", reason);
	}
	if (!shoal_peer_id_cmp(&msg->from, &sw->self->id)) {
		bad(sw, "message", "sent with our own id");
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "message claims our own id");
	}
	switch (msg->type) {
	case SHOAL_WIRE_PING:
		on_ping(sw, from, msg);
		break;
	case SHOAL_WIRE_ACK:
		on_ack(sw, msg);
		break;
	case SHOAL_WIRE_PING_REQ:
		on_ping_req(sw, from, msg);
		break;
	case SHOAL_WIRE_PUSHPULL:
		on_pushpull(sw, from, msg);
		break;
	}
	return SHOAL_OK;
}

/* ==== tick =============================================================== */

static struct member *random_live(shoal_swim *sw, const shoal_peer_id * not )
{
	for (unsigned tries = 0; tries < 8 && sw->n > 1; tries++) {
		struct member *m = sw->m[rnd(sw, sw->n)];
		if (m != sw->self && m->state == SHOAL_SWIM_STATE_ALIVE &&
		    (!not || shoal_peer_id_cmp(&m->id, not )))
			return m;
	}
	return NULL;
}

/* A random suspect, or NULL. O(N), only while there are suspects. */
/* A dead member (not one that left), uniformly at random; NULL: none. */
static struct member *random_dead(shoal_swim *sw)
{
	size_t n = 0;
	for (size_t i = 0; i < sw->n; i++)
		n += sw->m[i]->state == SHOAL_SWIM_STATE_DEAD;
	if (!n)
		return NULL;
	size_t k = rnd(sw, n);
	for (size_t i = 0; i < sw->n; i++)
		if (sw->m[i]->state == SHOAL_SWIM_STATE_DEAD && !k--)
			return sw->m[i];
	return NULL;
}

static struct member *random_suspect(shoal_swim *sw)
{
	size_t k = (size_t)rnd(sw, sw->n_suspect);
	for (size_t i = 0; i < sw->n; i++)
		if (sw->m[i]->state == SHOAL_SWIM_STATE_SUSPECT && k-- == 0)
			return sw->m[i];
	return NULL;
}

static void probe_start(shoal_swim *sw, uint64_t now)
{
	struct member *t = NULL;
	/* Every other probe goes to a suspect while there are any: the ping
	 * carries the suspicion (buddy system), so a live suspect refutes
	 * within a round even when our suspicion never got out (e.g. we were
	 * the one cut off, and every gossip of it was lost). Round-robin
	 * alone would reach it only after up to N rounds. */
	if (sw->n_suspect && (sw->st.probes & 1))
		t = random_suspect(sw);
	for (size_t tries = 0; tries <= sw->probe_n + 1 && !t; tries++) {
		if (sw->probe_i >= sw->probe_n) {
			probe_rebuild(sw);
			if (!sw->probe_n)
				return;
		}
		struct member *m = sw->probe[sw->probe_i++];
		if (live(m->state))
			t = m;
		else
			m->in_probe = 0; /* lazily dropped; see set_state */
	}
	if (!t)
		return;
	sw->pr.active = 1;
	sw->pr.acked = 0;
	sw->pr.indirect_sent = 0;
	sw->pr.seq = ++sw->seq;
	sw->pr.target = t->id;
	sw->pr.target_inc = t->inc;
	sw->pr.t_indirect = now + (uint64_t)ACK_MULT * sw->cfg.base_us;
	sw->pr.t_end = now + sw->period_us;
	sw->st.probes++;
	send_probe_msg(sw, t->ep, SHOAL_WIRE_PING, sw->pr.seq, &t->id, NULL,
	               t->state == SHOAL_SWIM_STATE_SUSPECT ? t : NULL);
}

static void probe_indirect(shoal_swim *sw)
{
	struct member *t = find(sw, &sw->pr.target);
	sw->pr.indirect_sent = 1;
	if (!t)
		return;
	for (unsigned k = 0; k < sw->cfg.indirect_k; k++) {
		struct member *via = random_live(sw, &t->id);
		if (via)
			send_probe_msg(sw, via->ep, SHOAL_WIRE_PING_REQ, sw->pr.seq, &t->id, t->ep,
			               NULL);
	}
}

static void probe_finish(shoal_swim *sw)
{
	sw->pr.active = 0;
	if (sw->pr.acked)
		return;
	sw->st.probes_failed++;
	struct member *t = find(sw, &sw->pr.target);
	if (t && t->inc == sw->pr.target_inc)
		suspect(sw, t);
}

/* How long m has been in its state at `now`. set_state() stamps since_us
 * with a fresh clock read, which can be later than a `now` read at the top
 * of the tick: a suspect that times out below is stamped a few us after the
 * tick's now (a real clock moves while the tick runs), and the unsigned
 * now - since_us would wrap to ~2^64 and reap the entry the moment it died
 * whenever that tick is also the once-a-period reap tick (~4% of runs at
 * N = 4, base 50 ms; tests/unit/test_swim test_dead_kept_small_fast). A stamp
 * from the future counts as age 0. */
static uint64_t state_age_us(const struct member *m, uint64_t now)
{
	return now > m->since_us ? now - m->since_us : 0;
}

/* Suspicion timeouts (every tick while there are suspects) and reaping
 * (once a period). */
static void check_timers(shoal_swim *sw, uint64_t now)
{
	int reap = now >= sw->next_reap_us;
	if (!sw->n_suspect && !reap)
		return;
	uint64_t keep = (uint64_t)REAP_MULT * suspect_timeout_us(sw);
	for (size_t i = 0; i < sw->n;) {
		struct member *m = sw->m[i];
		if (m->state == SHOAL_SWIM_STATE_SUSPECT && now >= m->suspect_deadline_us) {
			set_state(sw, m, SHOAL_SWIM_STATE_DEAD, m->inc);
			queue_update(sw, m);
			notify(sw, m, SHOAL_SWIM_STATE_SUSPECT, 0);
		}
		if (reap && m != sw->self && !live(m->state) && state_age_us(m, now) >= keep) {
			member_reap(sw, i);
			continue;
		}
		i++;
	}
	if (reap)
		sw->next_reap_us = now + sw->period_us;
}

static void joins_tick(shoal_swim *sw, uint64_t now)
{
	for (size_t i = 0; i < JOINS_MAX; i++) {
		struct join *j = &sw->joins[i];
		if (!j->used || now < j->next_us)
			continue;
		if (j->tries >= JOIN_TRIES) {
			SHOAL_LOG_W("swim", "join via %s: no answer after %u tries", j->ep,
			            j->tries);
			j->used = 0;
			continue;
		}
		j->tries++;
		j->next_us = now + (uint64_t)JOIN_RETRY_MULT * sw->period_us;
		send_pushpull(sw, j->ep, 1);
	}
}

static void leave_tell(shoal_swim *sw);

void shoal_swim_tick(shoal_swim *sw)
{
	uint64_t now = now_us(sw);
	check_timers(sw, now);
	if (sw->pr.active && !sw->pr.acked && !sw->pr.indirect_sent && now >= sw->pr.t_indirect)
		probe_indirect(sw);
	if (sw->pr.active && now >= sw->pr.t_end)
		probe_finish(sw);
	if (!sw->pr.active && now >= sw->next_probe_us) {
		probe_start(sw, now);
		sw->next_probe_us = now + sw->period_us;
	}
	if (sw->cfg.pushpull_mult != UINT32_MAX && now >= sw->next_pushpull_us) {
		struct member *m = random_live(sw, NULL);
		if (m)
			send_pushpull(sw, m->ep, 1);
		if (sw->boot_pp < BOOT_PUSHPULLS) {
			/* nobody to ask yet: try again next period */
			sw->boot_pp += m != NULL;
			sw->next_pushpull_us =
			    now + (m ? (uint64_t)BOOT_PP_MULT << sw->boot_pp : 1) * sw->period_us;
			if (sw->boot_pp == BOOT_PUSHPULLS)
				sw->next_pushpull_us =
				    now + (uint64_t)sw->cfg.pushpull_mult * sw->period_us / 2 +
				    rnd(sw, (uint64_t)sw->cfg.pushpull_mult * sw->period_us);
		} else {
			sw->next_pushpull_us =
			    now + (uint64_t)sw->cfg.pushpull_mult * sw->period_us;
		}
	}
	if (now >= sw->next_dead_pp_us) {
		/* a partition that healed: both sides think the other dead and
		 * probe only the live, so ask a dead one now and then; if it
		 * answers it refutes, and the next exchange brings it back */
		struct member *m = random_dead(sw);
		if (m)
			send_pushpull(sw, m->ep, 1);
		sw->next_dead_pp_us = now + (uint64_t)DEAD_PP_MULT * sw->period_us;
	}
	if (sw->leaving && now >= sw->next_tell_us) {
		leave_tell(sw);
		sw->next_tell_us = now + sw->period_us;
	}
	joins_tick(sw, now);
}

uint64_t shoal_swim_next_wakeup_us(const shoal_swim *sw)
{
	uint64_t t = sw->next_probe_us;
	if (sw->leaving && sw->next_tell_us < t)
		t = sw->next_tell_us;
	if (sw->next_dead_pp_us < t)
		t = sw->next_dead_pp_us;
	if (sw->pr.active) {
		if (!sw->pr.acked && !sw->pr.indirect_sent && sw->pr.t_indirect < t)
			t = sw->pr.t_indirect;
		if (sw->pr.t_end < t)
			t = sw->pr.t_end;
	}
	if (sw->n_suspect) {
		for (size_t i = 0; i < sw->n; i++)
			if (sw->m[i]->state == SHOAL_SWIM_STATE_SUSPECT &&
			    sw->m[i]->suspect_deadline_us < t)
				t = sw->m[i]->suspect_deadline_us;
	}
	for (size_t i = 0; i < JOINS_MAX; i++)
		if (sw->joins[i].used && sw->joins[i].next_us < t)
			t = sw->joins[i].next_us;
	if (sw->cfg.pushpull_mult != UINT32_MAX && sw->next_pushpull_us < t)
		t = sw->next_pushpull_us;
	return t;
}

/* ==== lifecycle, view, statistics ======================================== */

static shoal_err encode_self(shoal_swim *sw)
{
	shoal_err e = shoal_wire_record_encode(&sw->self_rec, &sw->recbuf);
	if (e)
		return e;
	if (sw->recbuf.len > SHOAL_WIRE_MAX_RECORD)
		return SHOAL_ERR_RANGE;
	if (member_set_record(sw, sw->self, sw->recbuf.data, sw->recbuf.len, &sw->self_rec))
		return SHOAL_ERR_NOMEM;
	sw->self->compatible = 1;
	return SHOAL_OK;
}

shoal_err shoal_swim_new(const shoal_swim_config *cfg, const shoal_record *self,
                         uint64_t incarnation, const shoal_swim_ops *ops, void *ctx,
                         shoal_swim **out, char *why, size_t why_len)
{
	shoal_err e = SHOAL_ERR_NOMEM;
	shoal_swim *sw = NULL;
	*out = NULL;
	if (!ops || !ops->now_us || !ops->rand64 || !ops->send || !self)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "swim: missing op or record");
	e = shoal_record_check(self, why, why_len);
	if (e)
		return SHOAL_ERR_INVAL;
	sw = calloc(1, sizeof *sw);
	if (!sw)
		goto fail;
	shoal_swim_config_default(&sw->cfg);
	if (cfg) {
		if (cfg->base_us)
			sw->cfg.base_us = cfg->base_us;
		if (cfg->indirect_k)
			sw->cfg.indirect_k = cfg->indirect_k;
		if (cfg->suspect_mult)
			sw->cfg.suspect_mult = cfg->suspect_mult;
		if (cfg->retransmit_mult)
			sw->cfg.retransmit_mult =
			    cfg->retransmit_mult > 16 ? 16 : cfg->retransmit_mult;
		if (cfg->pushpull_mult)
			sw->cfg.pushpull_mult = cfg->pushpull_mult;
	}
	sw->ops = ops;
	sw->ctx = ctx;
	sw->period_us = (uint64_t)PROBE_MULT * sw->cfg.base_us;
	/* Limits reach retransmit_mult * log2n(SHOAL_WIRE_MAX_UPDATES) = 13 x mult. */
	sw->n_bq = (size_t)sw->cfg.retransmit_mult * 13 + 1;
	sw->bq = calloc(sw->n_bq, sizeof *sw->bq);
	sw->in_up = calloc(SHOAL_WIRE_MAX_UPDATES, sizeof *sw->in_up);
	sw->out_up = calloc(SHOAL_WIRE_MAX_UPDATES, sizeof *sw->out_up);
	if (!sw->bq || !sw->in_up || !sw->out_up)
		goto fail;
	shoal_wire_buf_init(&sw->out);
	shoal_wire_buf_init(&sw->recbuf);
	sw->self_rec = *self;
	sw->self_rec.version = 1;
	sw->self = member_add(sw, &self->id);
	if (!sw->self)
		goto fail;
	e = encode_self(sw);
	if (e)
		goto fail;
	uint64_t now = now_us(sw);
	sw->self->since_us = now;
	set_state(sw, sw->self, SHOAL_SWIM_STATE_ALIVE, incarnation);
	sw->seq = ops->rand64(ctx) >> 16;
	/* Spread the first probe over one period so peers started together do
	 * not probe in lock-step. */
	sw->next_probe_us = now + rnd(sw, sw->period_us);
	sw->next_pushpull_us = now + (uint64_t)BOOT_PP_MULT * sw->period_us;
	sw->next_reap_us = now + sw->period_us;
	*out = sw;
	return SHOAL_OK;
fail:
	shoal_swim_free(sw);
	return shoal_why(why, why_len, e ? e : SHOAL_ERR_NOMEM, "swim: %s", shoal_strerror(e));
}

void shoal_swim_free(shoal_swim *sw)
{
	if (!sw)
		return;
	for (size_t i = 0; i < sw->n; i++) {
		free(sw->m[i]->rec);
		free(sw->m[i]);
	}
	free(sw->m);
	free(sw->probe);
	for (size_t i = 0; sw->bq && i < sw->n_bq; i++)
		free(sw->bq[i].v);
	free(sw->bq);
	free(sw->in_up);
	free(sw->out_up);
	shoal_wire_buf_fini(&sw->out);
	shoal_wire_buf_fini(&sw->recbuf);
	free(sw);
}

shoal_err shoal_swim_set_record(shoal_swim *sw, const shoal_record *r, char *why, size_t why_len)
{
	shoal_record old = sw->self_rec;
	if (shoal_peer_id_cmp(&r->id, &sw->self->id))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "record id is not ours");
	if (shoal_record_check(r, why, why_len))
		return SHOAL_ERR_INVAL;
	sw->self_rec = *r;
	sw->self_rec.version = old.version + 1;
	shoal_err e = encode_self(sw);
	if (e) {
		sw->self_rec = old;
		return shoal_why(why, why_len, e, "record does not encode: %s", shoal_strerror(e));
	}
	queue_update(sw, sw->self);
	return SHOAL_OK;
}

void shoal_swim_get_record(const shoal_swim *sw, shoal_record *out)
{
	*out = sw->self_rec;
}

uint64_t shoal_swim_incarnation(const shoal_swim *sw)
{
	return sw->self->inc;
}

shoal_err shoal_swim_join(shoal_swim *sw, const char *endpoint)
{
	if (!endpoint || !endpoint[0] || strlen(endpoint) >= SHOAL_RECORD_EP_MAX)
		return SHOAL_ERR_INVAL;
	if (!strcmp(endpoint, sw->self_rec.ctl_endpoint))
		return SHOAL_OK;
	for (size_t i = 0; i < sw->n; i++)
		if (sw->m[i]->state == SHOAL_SWIM_STATE_ALIVE && !strcmp(sw->m[i]->ep, endpoint))
			return SHOAL_OK;
	struct join *j = NULL;
	for (size_t i = 0; i < JOINS_MAX; i++) {
		if (sw->joins[i].used && !strcmp(sw->joins[i].ep, endpoint))
			return SHOAL_OK; /* already trying */
		if (!sw->joins[i].used && !j)
			j = &sw->joins[i];
	}
	if (!j)
		return SHOAL_ERR_BUSY;
	j->used = 1;
	j->tries = 0;
	j->next_us = now_us(sw);
	shoal_record_strcpy(j->ep, sizeof j->ep, endpoint);
	joins_tick(sw, j->next_us);
	return SHOAL_OK;
}

/* While leaving: a ping carrying our left update to LEAVE_TELL_MAX
 * distinct live peers (all of them when there are no more), the first at
 * a random place in the table, so the news also starts from that many
 * places at once. */
static void leave_tell(shoal_swim *sw)
{
	size_t start = sw->n ? rnd(sw, sw->n) : 0, told = 0;
	for (size_t j = 0; j < sw->n && told < LEAVE_TELL_MAX; j++) {
		struct member *m = sw->m[(start + j) % sw->n];
		if (m == sw->self || m->state != SHOAL_SWIM_STATE_ALIVE)
			continue;
		send_probe_msg(sw, m->ep, SHOAL_WIRE_PING, ++sw->seq, &m->id, NULL, sw->self);
		told++;
	}
}

void shoal_swim_leave(shoal_swim *sw)
{
	if (sw->leaving)
		return;
	sw->leaving = 1;
	set_state(sw, sw->self, SHOAL_SWIM_STATE_LEFT,
	          sw->self->inc < SHOAL_WIRE_INC_MAX ? sw->self->inc + 1 : SHOAL_WIRE_INC_MAX);
	queue_update(sw, sw->self);
	if (sw->ops->incarnation_changed)
		sw->ops->incarnation_changed(sw->ctx, sw->self->inc);
	leave_tell(sw);
	sw->next_tell_us = now_us(sw) + sw->period_us;
}

uint64_t shoal_swim_leave_linger_us(const shoal_swim *sw)
{
	return (uint64_t)LEAVE_LINGER_MULT * log2n(sw->n_live + 1) * sw->period_us;
}

shoal_err shoal_swim_view(const shoal_swim *sw, shoal_swim_member **out, size_t *n)
{
	shoal_swim_member *v = calloc(sw->n ? sw->n : 1, sizeof *v);
	*out = NULL;
	*n = 0;
	if (!v)
		return SHOAL_ERR_NOMEM;
	for (size_t i = 0; i < sw->n; i++)
		fill_member(sw, sw->m[i], &v[i]);
	*out = v;
	*n = sw->n;
	return SHOAL_OK;
}

void shoal_swim_view_free(shoal_swim_member *v)
{
	free(v);
}

shoal_err shoal_swim_lookup(const shoal_swim *sw, const shoal_peer_id *id, shoal_swim_brief *out)
{
	const struct member *m = find(sw, id);
	if (!m)
		return SHOAL_ERR_NOTFOUND;
	out->state = m->state;
	out->incarnation = m->inc;
	out->record_version = m->rv;
	out->compatible = m->compatible;
	return SHOAL_OK;
}

size_t shoal_swim_count(const shoal_swim *sw, shoal_swim_state s)
{
	size_t c = 0;
	for (size_t i = 0; i < sw->n; i++)
		c += sw->m[i]->state == s;
	return c;
}

void shoal_swim_get_stats(const shoal_swim *sw, shoal_swim_stats *out)
{
	*out = sw->st;
}
