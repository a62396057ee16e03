/*
 * runtime/cpu/membw.c: streaming-read bandwidth (see membw.h).
 *
 * Part: runtime/ (engine). The buffer is an anonymous mapping (huge pages
 * advised, to keep TLB misses out of the figure), filled by the thread that
 * will later read each slice (first touch places pages on its NUMA node).
 * The read loop keeps 4 independent vector sums so it is bound by memory,
 * not by the add latency; on x86 it uses AVX2 loads when the CPU has them.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "runtime/cpu/membw.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* 1 warm-up pass (faults, page zeroing) + 5 timed; best taken: noise from
 * other processes only ever slows a pass down. */
#define MEMBW_PASSES 6

typedef struct membw_slice {
	const unsigned char *p;
	size_t bytes;
	int fill;
	uint64_t sum;
	struct timespec t0, t1;
} membw_slice;

static double membw_now(const struct timespec *t)
{
	return (double)t->tv_sec + (double)t->tv_nsec * 1e-9;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t membw_read_avx2(const unsigned char *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	uint64_t s[4];
	_mm256_storeu_si256((__m256i *)s, a0);
	return s[0] + s[1] + s[2] + s[3];
}
#endif

static uint64_t membw_read(const unsigned char *p, size_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return membw_read_avx2(p, n);
	__m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 64 <= n; i += 64) {
		a0 = _mm_add_epi64(a0, _mm_load_si128((const __m128i *)(p + i)));
		a1 = _mm_add_epi64(a1, _mm_load_si128((const __m128i *)(p + i + 16)));
		a2 = _mm_add_epi64(a2, _mm_load_si128((const __m128i *)(p + i + 32)));
		a3 = _mm_add_epi64(a3, _mm_load_si128((const __m128i *)(p + i + 48)));
	}
	a0 = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
	uint64_t s[2];
	_mm_storeu_si128((__m128i *)s, a0);
	return s[0] + s[1];
#elif defined(__aarch64__)
	uint64x2_t a0 = vdupq_n_u64(0), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 64 <= n; i += 64) {
		a0 = vaddq_u64(a0, vld1q_u64((const uint64_t *)(p + i)));
		a1 = vaddq_u64(a1, vld1q_u64((const uint64_t *)(p + i + 16)));
		a2 = vaddq_u64(a2, vld1q_u64((const uint64_t *)(p + i + 32)));
		a3 = vaddq_u64(a3, vld1q_u64((const uint64_t *)(p + i + 48)));
	}
	a0 = vaddq_u64(vaddq_u64(a0, a1), vaddq_u64(a2, a3));
	return vgetq_lane_u64(a0, 0) + vgetq_lane_u64(a0, 1);
#else
	const uint64_t *q = (const uint64_t *)p;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	for (size_t i = 0; i + 4 <= n / 8; i += 4) {
		s0 += q[i];
		s1 += q[i + 1];
		s2 += q[i + 2];
		s3 += q[i + 3];
	}
	return s0 + s1 + s2 + s3;
#endif
}

static void *membw_thread(void *arg)
{
	membw_slice *s = arg;
	if (s->fill) {
		memset((void *)s->p, 1, s->bytes);
		return NULL;
	}
	clock_gettime(CLOCK_MONOTONIC, &s->t0);
	s->sum += membw_read(s->p, s->bytes);
	clock_gettime(CLOCK_MONOTONIC, &s->t1);
	return NULL;
}

/* Run one pass on all slices; returns its wall time in seconds, < 0 on error. */
static double membw_pass(membw_slice *sl, int threads, int fill)
{
	pthread_t tid[256];
	int started = 0;
	for (int t = 0; t < threads; t++) {
		sl[t].fill = fill;
		if (pthread_create(&tid[t], NULL, membw_thread, &sl[t]))
			break;
		started++;
	}
	for (int t = 0; t < started; t++)
		pthread_join(tid[t], NULL);
	if (started < threads)
		return -1.0;
	double t0 = membw_now(&sl[0].t0), t1 = membw_now(&sl[0].t1);
	for (int t = 1; t < threads; t++) {
		if (membw_now(&sl[t].t0) < t0)
			t0 = membw_now(&sl[t].t0);
		if (membw_now(&sl[t].t1) > t1)
			t1 = membw_now(&sl[t].t1);
	}
	return t1 - t0;
}

static volatile uint64_t membw_sink;

double shoal_membw_read_gbps(int threads, size_t bytes)
{
	if (threads < 1 || threads > 256 || bytes < (size_t)threads * 4096)
		return -1.0;
	/* slices of whole 4 KiB pages, 128-byte multiples for the read loop */
	size_t slice = bytes / (size_t)threads / 4096 * 4096;
	size_t total = slice * (size_t)threads;
	void *buf = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return -1.0;
#if defined(MADV_HUGEPAGE)
	madvise(buf, total, MADV_HUGEPAGE);
#endif
	membw_slice sl[256];
	for (int t = 0; t < threads; t++) {
		memset(&sl[t], 0, sizeof sl[t]);
		sl[t].p = (const unsigned char *)buf + (size_t)t * slice;
		sl[t].bytes = slice;
	}
	double best = -1.0;
	if (membw_pass(sl, threads, 1) >= 0.0) {
		for (int pass = 0; pass < MEMBW_PASSES; pass++) {
			double dt = membw_pass(sl, threads, 0);
			if (dt < 0.0) {
				best = -1.0;
				break;
			}
			if (pass > 0 && dt > 0.0 && (double)total / dt / 1e9 > best)
				best = (double)total / dt / 1e9;
		}
	}
	for (int t = 0; t < threads; t++)
		membw_sink += sl[t].sum;
	munmap(buf, total);
	return best;
}
