/*
 * runtime/node/timing.h: the plan's prediction checked against the run:
 * recent decode step times (the owner's steps end to end, this peer's
 * stage runs), their median, and the rule that says when a gap between
 * predicted and measured is large and persistent enough to log.
 *
 * Part: runtime/node (pure: no clock, no locks, no I/O); serve_data.c
 * feeds it from the metrics the owner and stage already keep, under the
 * serving state's lock, and serve_status.c and /metrics read it.
 */
#ifndef SHOAL_RUNTIME_NODE_TIMING_H
#define SHOAL_RUNTIME_NODE_TIMING_H

#include <stdbool.h>
#include <stdint.h>

/* Samples kept per series; the median is over the latest
 * SHOAL_TIMING_WINDOW of them (16 decode steps: a few disturbed steps
 * move it little, a change of pace shows within a second at tens of
 * ms a token). */
#define SHOAL_TIMING_RING   64u
#define SHOAL_TIMING_WINDOW 16u
/* The gap rule: once the window is full, a sample whose median is more
 * than SHOAL_TIMING_GAP_X times the prediction, or under 1 /
 * SHOAL_TIMING_GAP_X of it, counts as off; SHOAL_TIMING_GAP_STEPS such
 * samples in a row (two windows: not a burst of load) make the gap
 * persistent, and it is then reported once per plan. */
#define SHOAL_TIMING_GAP_X     2u
#define SHOAL_TIMING_GAP_STEPS 32u

typedef struct shoal_timing_series {
	uint64_t v[SHOAL_TIMING_RING];
	uint32_t at;    /* next slot */
	uint64_t count; /* samples pushed since the reset */
} shoal_timing_series;

void shoal_timing_series_reset(shoal_timing_series *s);
void shoal_timing_push(shoal_timing_series *s, uint64_t ns);
/* The median of the latest SHOAL_TIMING_WINDOW samples (fewer when fewer
 * came: the lower middle of an even count), 0 when none. */
uint64_t shoal_timing_median(const shoal_timing_series *s);

typedef struct shoal_timing_gap {
	uint32_t run; /* samples off in a row */
	bool logged;  /* reported under this plan */
} shoal_timing_gap;

/* One sample of series s (just pushed) against predicted_ns (0: no
 * prediction, nothing is judged). Returns true exactly once per reset:
 * when this sample makes the gap persistent; the caller logs then. */
bool shoal_timing_gap_note(shoal_timing_gap *g, const shoal_timing_series *s,
                           uint64_t predicted_ns);

#endif
