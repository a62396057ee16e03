/*
 * tests/unit/test_probe_timing.c: a data link's timing from its answered
 * probes (runtime/node/serve_probe.c, serve__dtime_note; invariant 6
 * there): the round trip published is the least of the last
 * SHOAL_SERVE_DRTT_WINDOW, in quarter-octave buckets with hysteresis; a
 * late echo (a probe that landed in an engine run) moves nothing; the
 * bandwidth is the large probe's payload over its least extra time.
 */
#include "runtime/node/serve_impl.h"

#include "scheduler/view.h"
#include "tests/unit/test.h"

static uint64_t bucket(uint64_t x)
{
	return shoal_bucket_geo_value(shoal_bucket_geo(x, SHOAL_BUCKET_NONE));
}

static void test_least_of_window(void)
{
	serve__dtime t;
	serve__dtime_init(&t);
	ASSERT_EQ(t.rtt_b, SHOAL_BUCKET_NONE);
	ASSERT_TRUE(serve__dtime_note(&t, false, 60));
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.rtt_b), bucket(60));
	/* a faster echo moves the bucket down; late ones (runs in the
	 * way, 2 ms) do not move it while the fast one is in the window */
	ASSERT_TRUE(serve__dtime_note(&t, false, 30));
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.rtt_b), bucket(30));
	for (uint32_t i = 0; i < SHOAL_SERVE_DRTT_WINDOW - 1; i++)
		ASSERT_FALSE(serve__dtime_note(&t, false, 2000));
	/* the fast one leaves the window: the least is now 2000 */
	ASSERT_TRUE(serve__dtime_note(&t, false, 2000));
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.rtt_b), bucket(2000));
	/* jitter within half a step of the bucket keeps it (hysteresis) */
	for (uint32_t i = 0; i < SHOAL_SERVE_DRTT_WINDOW; i++)
		serve__dtime_note(&t, false, 1000);
	uint32_t b = t.rtt_b;
	for (uint32_t i = 0; i < SHOAL_SERVE_DRTT_WINDOW; i++)
		ASSERT_FALSE(serve__dtime_note(&t, false, i & 1 ? 1030 : 980));
	ASSERT_EQ(t.rtt_b, b);
	/* 0 us (a clock too coarse to tell) counts as 1 */
	serve__dtime_init(&t);
	serve__dtime_note(&t, false, 0);
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.rtt_b), 1);
}

static void test_bandwidth(void)
{
	serve__dtime t;
	serve__dtime_init(&t);
	/* no small round trip yet: nothing to subtract, no figure */
	ASSERT_FALSE(serve__dtime_note(&t, true, 100));
	ASSERT_EQ(t.bw_b, SHOAL_BUCKET_NONE);
	serve__dtime_note(&t, false, 40);
	/* 64 KiB in 104 - 40 = 64 us: 1.024 GB/s */
	ASSERT_TRUE(serve__dtime_note(&t, true, 104));
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.bw_b),
	              bucket((uint64_t)SHOAL_SERVE_DRTT_BW_BYTES * 1000000u / 64));
	/* a slower large probe (a run in the way) leaves the least */
	ASSERT_FALSE(serve__dtime_note(&t, true, 900));
	/* a large echo no later than a small one: at least 1 us, 64 GB/s */
	ASSERT_TRUE(serve__dtime_note(&t, true, 35));
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.bw_b),
	              bucket((uint64_t)SHOAL_SERVE_DRTT_BW_BYTES * 1000000u));
	/* the round trip stays the small probes' alone */
	ASSERT_U64_EQ(shoal_bucket_geo_value(t.rtt_b), bucket(40));
}

TEST_MAIN(TEST_CASE(test_least_of_window), TEST_CASE(test_bandwidth))
