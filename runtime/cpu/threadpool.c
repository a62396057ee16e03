/*
 * runtime/cpu/threadpool.c: fork-join worker pool (see threadpool.h).
 *
 * A job is published by bumping `gen` under the mutex and broadcasting;
 * workers that are still spinning see the new generation without a system
 * call. Completion is a countdown of workers still busy; the caller spins
 * for it briefly, then sleeps on `done_cv`.
 */
#include "runtime/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/thread.h"

/* Spin budget before sleeping: 4096 pauses, ~10 ns (older Intel) to ~40 ns
 * (Skylake and later, Zen) each, i.e. ~40-160 us. Within a token the next
 * job comes within microseconds, so workers stay awake; between tokens
 * (sampling, I/O, waiting for the network) they sleep and leave the cores
 * to the processes they share them with. */
#define SHOAL_POOL_SPIN 4096
/* Every 64th pause becomes a sched_yield (~1 us): with more threads than
 * free cores, the thread we wait for gets the core instead of our spin. */
#define SHOAL_POOL_YIELD_MASK 63

#if defined(__x86_64__) || defined(__i386__)
#define shoal_pool_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define shoal_pool_relax() __asm__ __volatile__("yield")
#else
#define shoal_pool_relax() ((void)0)
#endif

static inline void pool_spin(int i)
{
	if ((i & SHOAL_POOL_YIELD_MASK) == SHOAL_POOL_YIELD_MASK)
		sched_yield();
	else
		shoal_pool_relax();
}

struct shoal_threadpool {
	uint32_t n;         /* threads, caller included */
	pthread_t *threads; /* (n - 1) */
	uint32_t n_started;
	pthread_mutex_t mu;
	pthread_cond_t work_cv;
	pthread_cond_t done_cv;
	_Atomic uint64_t gen;  /* job generation; odd/even carries no meaning */
	_Atomic uint32_t busy; /* workers still running the current job */
	bool stop;             /* under mu */
	shoal_threadpool_fn fn;
	void *ctx;
};

typedef struct shoal_pool_arg {
	shoal_threadpool *p;
	uint32_t ith;
} shoal_pool_arg;

static void *pool_main(void *arg_)
{
	shoal_pool_arg *arg = arg_;
	shoal_threadpool *p = arg->p;
	uint32_t ith = arg->ith;
	uint64_t seen = 0;
	free(arg);
	/* a worker computes, even in a pool that a background thread made (a
	 * node builds its engines on its control thread) */
	shoal_thread_compute();
	shoal_thread_name("shoal-worker");
	for (;;) {
		uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
		for (int i = 0; g == seen && i < SHOAL_POOL_SPIN; i++) {
			pool_spin(i);
			g = atomic_load_explicit(&p->gen, memory_order_acquire);
		}
		if (g == seen) {
			pthread_mutex_lock(&p->mu);
			while (!p->stop && atomic_load(&p->gen) == seen)
				pthread_cond_wait(&p->work_cv, &p->mu);
			bool stop = p->stop;
			g = atomic_load(&p->gen);
			pthread_mutex_unlock(&p->mu);
			if (stop && g == seen)
				return NULL;
		}
		seen = g;
		p->fn(p->ctx, ith, p->n);
		if (atomic_fetch_sub_explicit(&p->busy, 1, memory_order_acq_rel) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

shoal_err shoal_threadpool_new(uint32_t n_threads, shoal_threadpool **out)
{
	*out = NULL;
	if (n_threads < 1 || n_threads > 1024)
		return SHOAL_ERR_INVAL;
	shoal_threadpool *p = calloc(1, sizeof *p);
	if (!p)
		return SHOAL_ERR_NOMEM;
	p->n = n_threads;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	if (n_threads > 1) {
		p->threads = calloc(n_threads - 1, sizeof *p->threads);
		if (!p->threads)
			goto fail;
	}
	for (uint32_t i = 1; i < n_threads; i++) {
		shoal_pool_arg *arg = malloc(sizeof *arg);
		if (!arg)
			goto fail;
		arg->p = p;
		arg->ith = i;
		if (pthread_create(&p->threads[i - 1], NULL, pool_main, arg)) {
			free(arg);
			goto fail;
		}
		p->n_started++;
	}
	*out = p;
	return SHOAL_OK;
fail:
	shoal_threadpool_free(p);
	return SHOAL_ERR_NOMEM;
}

void shoal_threadpool_free(shoal_threadpool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (uint32_t i = 0; i < p->n_started; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work_cv);
	pthread_cond_destroy(&p->done_cv);
	free(p->threads);
	free(p);
}

uint32_t shoal_threadpool_n_threads(const shoal_threadpool *p)
{
	return p->n;
}

void shoal_threadpool_run(shoal_threadpool *p, shoal_threadpool_fn fn, void *ctx)
{
	if (p->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store_explicit(&p->busy, p->n - 1, memory_order_relaxed);
	pthread_mutex_lock(&p->mu);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);

	fn(ctx, 0, p->n);

	for (int i = 0; i < SHOAL_POOL_SPIN; i++) {
		if (atomic_load_explicit(&p->busy, memory_order_acquire) == 0)
			return;
		pool_spin(i);
	}
	pthread_mutex_lock(&p->mu);
	while (atomic_load_explicit(&p->busy, memory_order_acquire) != 0)
		pthread_cond_wait(&p->done_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
