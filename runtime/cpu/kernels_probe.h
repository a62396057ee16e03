/*
 * runtime/cpu/kernels_probe.h: a short measurement of a kernel table's own
 * quantized mat-vec speed, which a peer publishes in its record (compute
 * devices with measured GB/s and GFLOP/s, DESIGN.md section 3).
 *
 * Part: runtime/, room cpu/.
 */
#ifndef SHOAL_RUNTIME_KERNELS_PROBE_H
#define SHOAL_RUNTIME_KERNELS_PROBE_H

#include "base/err.h"
#include "runtime/cpu/kernels.h"

typedef struct shoal_kernels_probe_result {
	const char *isa;        /* k->isa (static) */
	double gemv_gbps;       /* Q8_0 gemv, one thread, over a matrix larger than the
	                         * last-level cache: weight bytes read per second / 1e9
	                         * (the decode speed; best pass) */
	double gemm_gflops;     /* Q8_0 gemm, one thread, cache-resident matrix, 32
	                         * columns: 2 * n * rows * cols / s / 1e9 (prefill) */
	const char *prefetch;   /* shoal_kernels_prefetch() after the probe (static) */
	double gemv_gbps_other; /* the stream with the other prefetch (0: not
	                         * measured: SHOAL_PREFETCH fixed it, or not x86) */
	unsigned elapsed_ms;    /* wall time the probe took */
} shoal_kernels_probe_result;

/* Measure table k (NULL: shoal_kernels_best()) for about budget_ms
 * milliseconds (clamped to 50..5000; 150-300 is meant for start-up). Blocks
 * the calling thread for that long; allocates about 64 MiB for the duration
 * and frees it. On x86, unless SHOAL_PREFETCH fixed it or the last-level
 * cache is more than half the stream (it would measure the cache), the passes
 * alternate the two prefetch choices of kernels.h and the faster one is
 * kept for the whole process (shoal_kernels_set_prefetch): gemv_gbps is
 * then its figure. Returns SHOAL_OK, or SHOAL_ERR_NOMEM (out is then zeroed). */
shoal_err shoal_kernels_probe(const shoal_kernels *k, unsigned budget_ms,
                              shoal_kernels_probe_result *out);

#endif
