/*
 * runtime/node/timing.c: recent decode step times, their median and the
 * gap rule (timing.h).
 *
 * Part: runtime/node (pure).
 */
#include "config.h"

#include "runtime/node/timing.h"

#include <string.h>

void shoal_timing_series_reset(shoal_timing_series *s)
{
	memset(s, 0, sizeof *s);
}

void shoal_timing_push(shoal_timing_series *s, uint64_t ns)
{
	s->v[s->at] = ns;
	s->at = (s->at + 1) % SHOAL_TIMING_RING;
	s->count++;
}

uint64_t shoal_timing_median(const shoal_timing_series *s)
{
	uint32_t n = s->count < SHOAL_TIMING_WINDOW ? (uint32_t)s->count : SHOAL_TIMING_WINDOW;
	if (!n)
		return 0;
	uint64_t w[SHOAL_TIMING_WINDOW];
	for (uint32_t i = 0; i < n; i++)
		w[i] = s->v[(s->at + SHOAL_TIMING_RING - 1 - i) % SHOAL_TIMING_RING];
	for (uint32_t i = 1; i < n; i++) /* insertion sort: 16 at most */
		for (uint32_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
			uint64_t t = w[j];
			w[j] = w[j - 1];
			w[j - 1] = t;
		}
	return w[(n - 1) / 2];
}

bool shoal_timing_gap_note(shoal_timing_gap *g, const shoal_timing_series *s, uint64_t predicted_ns)
{
	if (!predicted_ns || s->count < SHOAL_TIMING_WINDOW)
		return false;
	uint64_t m = shoal_timing_median(s);
	bool off = m / SHOAL_TIMING_GAP_X > predicted_ns || m < predicted_ns / SHOAL_TIMING_GAP_X;
	g->run = off ? g->run + 1 : 0;
	if (g->logged || g->run < SHOAL_TIMING_GAP_STEPS)
		return false;
	g->logged = true;
	return true;
}
