/*
 * base/clock.h: the time every part reads, from one replaceable source.
 *
 * The source is CLOCK_MONOTONIC unless a test replaces it with
 * shoal_clock_set(), e.g. with a virtual clock that it advances by hand.
 * Like the log level it is process-wide; code that runs many simulated
 * peers in one process passes each its own clock instead (net/swim.h's
 * now_us op). Readings are nanoseconds since an arbitrary start; the
 * microsecond and millisecond forms are the same reading divided down.
 */
#ifndef SHOAL_BASE_CLOCK_H
#define SHOAL_BASE_CLOCK_H

#include <stdint.h>

/* A time source: nanoseconds, never decreasing. Called from any thread. */
typedef uint64_t (*shoal_clock_fn)(void);

uint64_t shoal_clock_now_ns(void);
uint64_t shoal_clock_now_us(void);
uint64_t shoal_clock_now_ms(void);

/* Read time from fn from now on; NULL restores CLOCK_MONOTONIC. Safe to
 * call while other threads read the clock. */
void shoal_clock_set(shoal_clock_fn fn);

/* CLOCK_MONOTONIC itself, whatever shoal_clock_set() chose. */
uint64_t shoal_clock_monotonic_ns(void);

#endif
