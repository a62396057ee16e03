/*
 * tests/unit/test_clock.c: base/clock.h: the real clock does not go back,
 * a replaced source is what every reading sees (ns, us, ms), and NULL
 * brings CLOCK_MONOTONIC back.
 */
#include "config.h"

#include <time.h>

#include "base/clock.h"
#include "tests/unit/test.h"

static uint64_t fake_ns;

static uint64_t fake_clock(void)
{
	return fake_ns;
}

static void test_monotonic(void)
{
	uint64_t a = shoal_clock_now_ns();
	struct timespec pause = {0, 2000000}; /* 2 ms */
	nanosleep(&pause, NULL);
	uint64_t b = shoal_clock_now_ns();
	ASSERT_GE(b - a, 2000000);
	ASSERT_LT(b - a, 10ull * 1000000000u); /* not some other clock's scale */
	ASSERT_GE(shoal_clock_now_us(), b / 1000);
	ASSERT_GE(shoal_clock_monotonic_ns(), b);
}

static void test_injected(void)
{
	fake_ns = 5ull * 1000000000u + 123456789u;
	shoal_clock_set(fake_clock);
	ASSERT_U64_EQ(shoal_clock_now_ns(), 5123456789ull);
	ASSERT_U64_EQ(shoal_clock_now_us(), 5123456ull);
	ASSERT_U64_EQ(shoal_clock_now_ms(), 5123ull);
	fake_ns += 1000000; /* the test moves time by hand */
	ASSERT_U64_EQ(shoal_clock_now_ms(), 5124ull);
	/* the real clock stays reachable */
	ASSERT_NE(shoal_clock_monotonic_ns(), fake_ns);
	shoal_clock_set(NULL);
	uint64_t real = shoal_clock_monotonic_ns();
	uint64_t now = shoal_clock_now_ns();
	ASSERT_GE(now, real);
	ASSERT_LT(now - real, 1000000000u);
}

TEST_MAIN(TEST_CASE(test_monotonic), TEST_CASE(test_injected))
