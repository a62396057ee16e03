/*
 * net/swim.h: membership -- the SWIM gossip state machine of one peer.
 *
 * Part of net/ (DESIGN.md section 3). A shoal_swim knows every peer of the
 * cluster (alive, suspect, dead or left), probes one of them per protocol
 * period, piggybacks membership and record updates on its probes, and
 * answers a joining peer with its full state. It does no I/O of its own:
 * bytes come in through shoal_swim_receive(), go out through the injected
 * send callback, time and randomness come from the injected ops, and
 * shoal_swim_tick() does the periodic work. The real node drives it with
 * ZeroMQ (net/node), tests drive hundreds of them over tests/helpers/sim_net.
 *
 * Not thread-safe: one thread calls every function of one shoal_swim, and
 * callbacks run inside those calls (they must not call back into it).
 */
#ifndef SHOAL_NET_SWIM_H
#define SHOAL_NET_SWIM_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/record.h"

typedef struct shoal_swim shoal_swim;

typedef enum shoal_swim_state {
	SHOAL_SWIM_STATE_ALIVE = 0,
	SHOAL_SWIM_STATE_SUSPECT,
	SHOAL_SWIM_STATE_DEAD,
	SHOAL_SWIM_STATE_LEFT,
	SHOAL_SWIM_STATE__COUNT
} shoal_swim_state;

/* "alive", "suspect", "dead", "left"; never NULL. */
const char *shoal_swim_state_name(shoal_swim_state s);

#define SHOAL_SWIM_WHY_MAX 96

/* One entry of the view, as the node prints or plans with it. */
typedef struct shoal_swim_member {
	shoal_peer_id id;
	shoal_swim_state state;
	uint64_t incarnation;
	uint64_t state_since_us; /* our clock when this entry last changed state */
	int is_self;
	/* 0 when its protocol/scheduler version or cluster cannot work with
	 * ours: kept in the view, left out of plans; `why` says why. */
	int compatible;
	char why_incompatible[SHOAL_SWIM_WHY_MAX];
	shoal_record record; /* the freshest we have; record.version is its sequence */
} shoal_swim_member;

/* The cheap look-up (no record copy) tests and the node use in loops. */
typedef struct shoal_swim_brief {
	shoal_swim_state state;
	uint64_t incarnation;
	uint64_t record_version;
	int compatible;
} shoal_swim_brief;

/* What the outside world gives a shoal_swim. Every call is made from inside
 * a shoal_swim_* call of the owning thread. */
typedef struct shoal_swim_ops {
	/* Monotonic time in microseconds (virtual in tests). Required; must not
	 * block. */
	uint64_t (*now_us)(void *ctx);
	/* 64 uniformly random bits from a generator the caller seeded. Required. */
	uint64_t (*rand64)(void *ctx);
	/* Send buf[len] to a control endpoint (a record's ctl_endpoint, or what
	 * shoal_swim_join was given). Required. Must not block: queue or drop
	 * (a lost message is normal for SWIM). buf is borrowed for the call
	 * only. The return value only feeds the statistics. */
	shoal_err (*send)(void *ctx, const char *endpoint, const uint8_t *buf, size_t len);
	/* Optional (may be NULL): a member was added or changed state. m is
	 * borrowed for the call. */
	void (*member_changed)(void *ctx, const shoal_swim_member *m, shoal_swim_state old_state,
	                       int is_new);
	/* Optional (may be NULL): our own incarnation grew (refutation, leave).
	 * Persist it: a restart should start above it (it still works if the
	 * restart starts lower -- we refute -- but takes a few more rounds). */
	void (*incarnation_changed)(void *ctx, uint64_t incarnation);
} shoal_swim_ops;

/* Tuning. Defaults (shoal_swim_config_default) are derived in net/swim.c;
 * zero in a field means "the default". */
typedef struct shoal_swim_config {
	uint32_t base_us;         /* the base period every timer is a multiple of */
	uint32_t indirect_k;      /* ping-req fan-out */
	uint32_t suspect_mult;    /* suspicion timeout, in ceil(log2(N+1)) protocol periods */
	uint32_t retransmit_mult; /* piggyback each update this * ceil(log2(N+1)) times */
	uint32_t pushpull_mult;   /* periodic full-state exchange every this many periods; */
	                          /* UINT32_MAX: never (joins still push-pull) */
} shoal_swim_config;

void shoal_swim_config_default(shoal_swim_config *c);

/* Create the membership of the local peer `self` (its id, name, endpoints,
 * versions; self->version is ignored and starts at 1) at `incarnation` (the
 * persisted one + 1, or 0). ops is borrowed for the lifetime of the object,
 * ctx is passed to every op. cfg may be NULL (defaults). *out is owned by
 * the caller (shoal_swim_free). */
shoal_err shoal_swim_new(const shoal_swim_config *cfg, const shoal_record *self,
                         uint64_t incarnation, const shoal_swim_ops *ops, void *ctx,
                         shoal_swim **out, char *why, size_t why_len);
void shoal_swim_free(shoal_swim *sw);

/* Replace our record (memory, compute, links, load...). The id must stay
 * the same; the version is bumped here and the new record is gossiped.
 * SHOAL_ERR_INVAL if the record does not pass shoal_record_check. */
shoal_err shoal_swim_set_record(shoal_swim *sw, const shoal_record *r, char *why, size_t why_len);
/* Our current record (with its version) into *out. */
void shoal_swim_get_record(const shoal_swim *sw, shoal_record *out);
uint64_t shoal_swim_incarnation(const shoal_swim *sw);

/* Handle one control message that arrived from `from` (the sender's
 * endpoint as the transport knows it; may be NULL or "" -- replies then go
 * to the sender's ctl_endpoint). Bad bytes are dropped with a rate-limited
 * log line and an error (SHOAL_ERR_FORMAT, _UNSUPPORTED, _PROTO) is
 * returned; the object keeps working. */
shoal_err shoal_swim_receive(shoal_swim *sw, const char *from, const uint8_t *buf, size_t len,
                             char *why, size_t why_len);

/* Do the work that is due: start a probe, escalate to ping-req, declare
 * suspects dead, reap old dead/left entries, retry joins. Call it at least
 * every base period (more often is fine and cheap). */
void shoal_swim_tick(shoal_swim *sw);
/* The time (our clock, us) at which the next tick has work to do. */
uint64_t shoal_swim_next_wakeup_us(const shoal_swim *sw);

/* Discovery found a peer (mDNS, --peer seed): do a full state exchange
 * (push-pull) with that endpoint. Retried every few periods until it
 * answers (or for a bounded time). A no-op for an endpoint we already know
 * as alive. */
shoal_err shoal_swim_join(shoal_swim *sw, const char *endpoint);

/* Graceful leave (SIGTERM): mark ourselves `left` at a higher incarnation
 * and tell up to a few peers at once; keep ticking for
 * shoal_swim_leave_linger_us() so the news spreads, then free. */
void shoal_swim_leave(shoal_swim *sw);
uint64_t shoal_swim_leave_linger_us(const shoal_swim *sw);

/* Evidence, not suspicion: the caller saw member `id` die (its data
 * connection broke without a goodbye). It becomes dead at once, at
 * `incarnation`, and that is gossiped; a peer that is in fact alive
 * refutes it as it would a suspicion. SHOAL_ERR_NOTFOUND: unknown or
 * ourselves; SHOAL_ERR_STATE: not live, or its incarnation is no longer
 * `incarnation` (it restarted: the evidence is about the old one). */
shoal_err shoal_swim_declare_dead(shoal_swim *sw, const shoal_peer_id *id, uint64_t incarnation);

/* The whole view, ourselves included, in id order. *out is a malloc'd
 * array owned by the caller (shoal_swim_view_free). */
shoal_err shoal_swim_view(const shoal_swim *sw, shoal_swim_member **out, size_t *n);
void shoal_swim_view_free(shoal_swim_member *v);

/* One member without copying its record. SHOAL_ERR_NOTFOUND if unknown. */
shoal_err shoal_swim_lookup(const shoal_swim *sw, const shoal_peer_id *id, shoal_swim_brief *out);
/* How many members (ourselves included) are in state s. */
size_t shoal_swim_count(const shoal_swim *sw, shoal_swim_state s);

typedef struct shoal_swim_stats {
	uint64_t msgs_sent, bytes_sent;
	uint64_t msgs_recv, bytes_recv;
	uint64_t msgs_bad; /* dropped by the decoder or the protocol checks */
	uint64_t probes, probes_failed, suspicions, refutations;
	uint64_t pushpulls;
} shoal_swim_stats;
void shoal_swim_get_stats(const shoal_swim *sw, shoal_swim_stats *out);

#endif
