/*
 * tests/unit/test_timing.c: runtime/node/timing.c: the median of recent
 * decode steps and the gap rule (a large gap that persists is reported
 * once per plan, not per step; a short burst is not reported).
 */
#include "config.h"

#include "runtime/node/timing.h"

#include "tests/unit/test.h"

static void test_median(void)
{
	shoal_timing_series s;
	shoal_timing_series_reset(&s);
	ASSERT_U64_EQ(shoal_timing_median(&s), 0);
	shoal_timing_push(&s, 30);
	shoal_timing_push(&s, 10);
	shoal_timing_push(&s, 20);
	ASSERT_U64_EQ(shoal_timing_median(&s), 20);
	shoal_timing_push(&s, 40); /* even count: the lower middle */
	ASSERT_U64_EQ(shoal_timing_median(&s), 20);
	/* only the latest window counts: after a window of 1000s, 1000 */
	for (uint32_t i = 0; i < SHOAL_TIMING_WINDOW; i++)
		shoal_timing_push(&s, 1000 + i);
	ASSERT_U64_EQ(shoal_timing_median(&s), 1000 + (SHOAL_TIMING_WINDOW - 1) / 2);
	/* over the ring's wrap */
	for (uint32_t i = 0; i < 3 * SHOAL_TIMING_RING + 5; i++)
		shoal_timing_push(&s, i % 2 ? 7 : 9);
	uint64_t m = shoal_timing_median(&s);
	ASSERT_TRUE(m == 7 || m == 9);
	ASSERT_U64_EQ(s.count, 4 + SHOAL_TIMING_WINDOW + 3 * SHOAL_TIMING_RING + 5);
}

/* Push n samples of ns, noting each against pred; returns how many notes
 * said "log now". */
static uint32_t feed(shoal_timing_series *s, shoal_timing_gap *g, uint64_t ns, uint32_t n,
                     uint64_t pred)
{
	uint32_t logs = 0;
	for (uint32_t i = 0; i < n; i++) {
		shoal_timing_push(s, ns);
		logs += shoal_timing_gap_note(g, s, pred);
	}
	return logs;
}

static void test_gap_logged_once(void)
{
	shoal_timing_series s;
	shoal_timing_gap g = {0};
	shoal_timing_series_reset(&s);
	/* 3x slow for many steps: one report, at the step that makes it
	 * persistent (window full, then GAP_STEPS off in a row) */
	uint32_t logs = 0, at = 0;
	for (uint32_t i = 0; i < 500; i++) {
		shoal_timing_push(&s, 3000);
		if (shoal_timing_gap_note(&g, &s, 1000)) {
			logs++;
			at = i + 1;
		}
	}
	ASSERT_EQ(logs, 1u);
	ASSERT_EQ(at, SHOAL_TIMING_WINDOW - 1 + SHOAL_TIMING_GAP_STEPS);
	ASSERT_TRUE(g.logged);
	/* still off, or back and off again: not again under this plan */
	ASSERT_EQ(feed(&s, &g, 1000, 100, 1000), 0u);
	ASSERT_EQ(feed(&s, &g, 5000, 100, 1000), 0u);
	/* a new plan (reset): reported again */
	shoal_timing_series_reset(&s);
	g = (shoal_timing_gap){0};
	ASSERT_EQ(feed(&s, &g, 5000, 100, 1000), 1u);
	/* too fast counts too: 3x under the prediction */
	shoal_timing_series_reset(&s);
	g = (shoal_timing_gap){0};
	ASSERT_EQ(feed(&s, &g, 300, 100, 1000), 1u);
}

static void test_gap_not_logged(void)
{
	shoal_timing_series s;
	shoal_timing_gap g = {0};
	shoal_timing_series_reset(&s);
	/* within 2x either way: never */
	ASSERT_EQ(feed(&s, &g, 1900, 200, 1000), 0u);
	ASSERT_EQ(feed(&s, &g, 600, 200, 1000), 0u);
	/* a burst shorter than GAP_STEPS, then back: never */
	ASSERT_EQ(feed(&s, &g, 1000, 50, 1000), 0u);
	ASSERT_EQ(feed(&s, &g, 9000, SHOAL_TIMING_GAP_STEPS - 1, 1000), 0u);
	ASSERT_EQ(feed(&s, &g, 1000, 50, 1000), 0u);
	ASSERT_FALSE(g.logged);
	/* a few slow steps within a window do not move the median */
	for (uint32_t i = 0; i < 200; i++)
		ASSERT_FALSE(feed(&s, &g, i % 4 ? 1000 : 9000, 1, 1000));
	/* no prediction: nothing judged */
	shoal_timing_series_reset(&s);
	ASSERT_EQ(feed(&s, &g, 9000, 200, 0), 0u);
	ASSERT_FALSE(g.logged);
}

TEST_MAIN(TEST_CASE(test_median), TEST_CASE(test_gap_logged_once), TEST_CASE(test_gap_not_logged))
