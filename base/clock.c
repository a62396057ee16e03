/*
 * base/clock.c: the replaceable time source (see clock.h).
 */
#include "base/clock.h"

#include <stdatomic.h>
#include <time.h>

/* NULL: CLOCK_MONOTONIC. Atomic so that a test may swap it while threads
 * read; relaxed, since a reading orders nothing else. */
static _Atomic(shoal_clock_fn) shoal_clock_source;

uint64_t shoal_clock_monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t shoal_clock_now_ns(void)
{
	shoal_clock_fn fn = atomic_load_explicit(&shoal_clock_source, memory_order_relaxed);
	return fn ? fn() : shoal_clock_monotonic_ns();
}

uint64_t shoal_clock_now_us(void)
{
	return shoal_clock_now_ns() / 1000u;
}

uint64_t shoal_clock_now_ms(void)
{
	return shoal_clock_now_ns() / 1000000u;
}

void shoal_clock_set(shoal_clock_fn fn)
{
	atomic_store_explicit(&shoal_clock_source, fn, memory_order_relaxed);
}
