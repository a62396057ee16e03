/*
 * runtime/cpu/threadpool.h: a fixed pool of worker threads that run one
 * function on every thread at once, fork-join style.
 *
 * Part: runtime/ (engine). The engine calls shoal_threadpool_run once per
 * matrix product or per-row stage; the caller's thread is worker 0, so a
 * pool of n threads starts n - 1 pthreads. Idle workers spin briefly (a
 * decode step issues its next job within microseconds) and then sleep on a
 * condition variable, so a pool never busy-polls for long on cores that
 * other processes share.
 */
#ifndef SHOAL_RUNTIME_THREADPOOL_H
#define SHOAL_RUNTIME_THREADPOOL_H

#include <stdint.h>

#include "base/err.h"

typedef struct shoal_threadpool shoal_threadpool; /* opaque */

/* The job: called once on each of the nth threads with ith in [0, nth). */
typedef void (*shoal_threadpool_fn)(void *ctx, uint32_t ith, uint32_t nth);

/* Start a pool of n_threads (>= 1; the caller counts as one). */
shoal_err shoal_threadpool_new(uint32_t n_threads, shoal_threadpool **out);
void shoal_threadpool_free(shoal_threadpool *p); /* NULL is a no-op; joins */

uint32_t shoal_threadpool_n_threads(const shoal_threadpool *p);

/* Run fn(ctx, ith, nth) on every thread and return when all have returned.
 * Not re-entrant: one job at a time, from one caller thread. */
void shoal_threadpool_run(shoal_threadpool *p, shoal_threadpool_fn fn, void *ctx);

#endif
