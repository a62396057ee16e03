/*
 * runtime/node/serve_limits.h: the serving half's sizes, waits and probe
 * figures (serve_impl.h includes it), each with the reason for its value.
 *
 * Part: runtime/ (node). Not a public header.
 */
#ifndef SHOAL_RUNTIME_SERVE_LIMITS_H
#define SHOAL_RUNTIME_SERVE_LIMITS_H

#include "models/manifest.h"
#include "scheduler/plan.h"

/* Peers a plan or a view may name: the scheduler's own practical bound for
 * a desk or a lab is far below; 64 matches SHOAL_RECORD_MAX_LINKS. */
#define SHOAL_SERVE_MAX_PEERS 64
/* Requests one node holds, running and queued (`shoal run --peer`): past
 * that a request is refused as busy, with the retry flag. */
#define SHOAL_SERVE_MAX_RUNS     64
#define SHOAL_SERVE_MAX_RUNS_STR "64"
/* KV sessions per stage (`shoal node --sessions`): the default 2 lets a
 * new request open while the previous one's CLOSE is in flight; the plan
 * reserves KV for every session. An owner runs at most this many of its
 * requests at once; the others wait in its queue. */
#define SHOAL_SERVE_SESSIONS     SHOAL_SCHED_SESSIONS_DEFAULT /* scheduler/plan.h */
#define SHOAL_SERVE_MAX_SESSIONS 16
/* A request a stage refused for want of a free session is tried again
 * after this long (other owners' sessions hold the slots). */
#define SHOAL_SERVE_BUSY_RETRY_MS 200u
/* Rows per TOKEN frame and per engine run: 64 rows of a 4096-wide model
 * are 1 MiB of F32, the xfer default max frame (less the header: 32 is
 * what fits; the test models are 512 wide). */
#define SHOAL_SERVE_MAX_ROWS 32
/* the scheduler counts a sliding layer's ring by the same rows */
_Static_assert(SHOAL_SERVE_MAX_ROWS == SHOAL_MANIFEST_KV_RING_ROWS,
               "a sliding layer's ring in the manifest and in the engine");
/* Events the data thread queues for the node thread: a token per entry;
 * the node thread drains every base period or sooner when woken, so 256
 * covers bursts of several concurrent runs. */
#define SHOAL_SERVE_EVENTS 256
/* A request (new, or paused by a plan change) waits this long for a
 * servable plan; a session this long for its next token before it fails
 * (a stage that hangs without its link breaking or gossip noticing). */
#define SHOAL_SERVE_WAIT_MS 20000u
/* When the plan went because one of its peers was declared dead, and the
 * peers left cannot hold the model, a new request still waits this many
 * base periods (10 s at the default 100 ms) before it is refused: the
 * death may be false (heavy loss; the peer refutes and the same plan is
 * back in a few rounds) -- 2.5 suspicion timeouts of a cluster of <= 3,
 * 1.7 of <= 7. A graceful leave and a cluster that never had a plan
 * refuse at once. */
#define SHOAL_SERVE_DIED_WAIT_MULT 100u
/* A run that waits for a session while the plan is servable waits in
 * order (FIFO per priority: paused runs first, then new requests as they
 * came), without the deadline above; it fails only after this long, as
 * does a paused run whose replays keep breaking on a servable plan (a
 * full queue, 64 runs of 64 tokens at 20 tokens/s on 2 sessions, drains
 * in ~100 s). */
#define SHOAL_SERVE_QUEUE_MS    120000u
#define SHOAL_SERVE_SILENCE_MS  30000u
#define SHOAL_SERVE_LINKS       (2 * SHOAL_SERVE_MAX_PEERS)
#define SHOAL_SERVE_DEFAULT_CTX 4096u /* the context of local `shoal run` */
/* The link every plan assumes unless --link-us says otherwise: gigabit
 * Ethernet, ~200 us for a small frame through two kernels, 125 MB/s. */
#define SHOAL_SERVE_LINK_US 200u
#define SHOAL_SERVE_LINK_BW 125000000u
/* Data-plane probes (serve_probe.c). Every 5 base periods (500 ms at the
 * default 100 ms, as a SWIM protocol period) each peer probes every other
 * peer serving the model over a PROBE data link. An echo must come within
 * 1000 ms, or 8 step times when that is longer: the far data thread
 * answers between two batches, so one engine run delays it; the step is
 * the longer of our stage's latest and the longest run of the last
 * minute the far peer told in its latest echo (8 leaves room for a
 * longer prefill chunk than it told, and for a run of ours): a
 * LAN answers in < 1 ms, and a peer whose frames take a second each turns
 * a 0.6 s reply into tens of seconds. 3 failures in a row (3-4.5 s: each
 * waits out its bound) make a suspect, so a lost probe or a second-long
 * stall of an overloaded machine does not; 2 observers that name
 * it leave it out of the plan, so no single peer's opinion (its own data
 * plane may be the broken one) removes anyone. */
#define SHOAL_SERVE_PROBE_MULT     5u
#define SHOAL_SERVE_PROBE_FLOOR_MS 1000u
#define SHOAL_SERVE_PROBE_STEPS    8u
#define SHOAL_SERVE_PROBE_FAILS    3u
#define SHOAL_SERVE_DSUSPECT_VOTES 2u
/* The data-plane round trip a peer gossips for another (its record's
 * dlinks, what a plan's prediction charges a hop and a tensor round): the
 * least echo of its last 16 answered probes (8 s at the default 100 ms base
 * period), in quarter-octave buckets with hysteresis. The least, because
 * an echo waits for the far data thread between engine runs: a probe that
 * lands during a run is late by that run, not by the wire; a hop of the
 * decode loop finds the far thread waiting, as the least echo did. 16,
 * because while a cluster decodes most probes land in a run, and one in 16
 * between two still gives the wire's figure; and a link that got slower
 * shows within 8 s. */
#define SHOAL_SERVE_DRTT_WINDOW 16u
/* The bandwidth probe's payload: 64 KiB, the size of the largest frame of
 * a decode step on a small model (a tensor group's head gather of 32 k
 * vocab rows over 2 members: 16 k x 4 bytes); 5 us at 100 Gbit/s, 5 ms at
 * 100 Mbit/s, so its extra time stands out of a round trip's jitter on
 * all but the fastest links. Every 4th probe of a target (one in 2 s at
 * the default period): 4 of them in the round-trip window. */
#define SHOAL_SERVE_DRTT_BW_BYTES  65536u
#define SHOAL_SERVE_DRTT_BW_EVERY  4u
#define SHOAL_SERVE_DRTT_BW_WINDOW (SHOAL_SERVE_DRTT_WINDOW / SHOAL_SERVE_DRTT_BW_EVERY)
/* The longest engine run an echo tells is that of the last minute: a
 * prefill's long chunks stay known between requests of a busy minute. */
#define SHOAL_SERVE_RUN_MAX_US 60000000u
/* While the data thread drains a link (a long prompt's frames queued, each
 * run as it comes), it still answers the probes at least this often: a
 * peer busy computing is not one whose data plane fails. */
#define SHOAL_SERVE_ECHO_EVERY_US 50000u

#endif
