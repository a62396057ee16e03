/*
 * runtime/cpu/kernels_probe.c: the start-up compute probe (see kernels_probe.h).
 *
 * Part: runtime/, room cpu/. Two phases share the budget: 60 % streams a
 * 64 MiB Q8_0 matrix through gemv (64 MiB is twice the 32 MiB L3 of one
 * EPYC CCD and 4x an Apple M-series SLC slice, so most of it comes from
 * DRAM), 40 % runs gemm on a 1024 x 256 Q8_0 matrix (272 KiB: resident in
 * L2) against 32 activation columns. Each phase keeps the best repetition
 * (at least 2 of the stream, whose first passes run slow while the kernel
 * settles the fresh mapping): interference only ever slows one down. The
 * setup (mapping and filling 64 MiB) counts against the budget. On x86,
 * where the last-level cache is at most half the stream, the stream's
 * passes alternate the two prefetch choices (kernels.h) and keep the faster
 * for the process.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cpu/kernels_probe.h"
#include "runtime/cpu/quant.h"

#define PROBE_STREAM_BYTES ((size_t)64 << 20)
#define PROBE_STREAM_N     4096 /* row length: 128 blocks, 4352 bytes a row */
#define PROBE_GEMM_N       1024
#define PROBE_GEMM_ROWS    256
#define PROBE_GEMM_COLS    32

static double probe_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Any bytes make valid Q8_0 blocks as long as the fp16 scales are finite:
 * 0x11 everywhere is scale 0x1111 (about 5.8e-4) and quants 17. memset is
 * the fastest fill (it also faults the pages in). */
static void probe_fill_q8_0(unsigned char *p, size_t bytes)
{
	memset(p, 0x11, bytes);
}

shoal_err shoal_kernels_probe(const shoal_kernels *k, unsigned budget_ms,
                              shoal_kernels_probe_result *out)
{
	memset(out, 0, sizeof *out);
	if (!k)
		k = shoal_kernels_best();
	if (budget_ms < 50)
		budget_ms = 50;
	if (budget_ms > 5000)
		budget_ms = 5000;
	double start = probe_now();
	size_t row = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, PROBE_STREAM_N);
	int64_t rows = (int64_t)(PROBE_STREAM_BYTES / row);
	size_t wbytes = row * (size_t)rows;
	unsigned char *w =
	    mmap(NULL, wbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED)
		return SHOAL_ERR_NOMEM;
#if defined(MADV_HUGEPAGE)
	madvise(w, wbytes, MADV_HUGEPAGE);
#endif
	size_t xrow = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, PROBE_STREAM_N);
	float *xf = malloc(sizeof(float) * PROBE_STREAM_N);
	unsigned char *xq = malloc(xrow * PROBE_GEMM_COLS);
	float *y = malloc(sizeof(float) * (size_t)rows);
	if (!xf || !xq || !y) {
		munmap(w, wbytes);
		free(xf);
		free(xq);
		free(y);
		return SHOAL_ERR_NOMEM;
	}
	probe_fill_q8_0(w, wbytes);
	for (int i = 0; i < PROBE_STREAM_N; i++)
		xf[i] = (float)((i * 7) % 19) - 9.0f;
	k->quantize_act(SHOAL_DTYPE_Q8_0, xf, xq, PROBE_STREAM_N);
	for (int c = 1; c < PROBE_GEMM_COLS; c++)
		memcpy(xq + (size_t)c * xrow, xq, xrow);

	/* phase 1: stream (the first pass also faults the pages in: not counted) */
	double t_end = start + budget_ms * 0.6e-3, best = 0.0, pf_best[2] = {0.0, 0.0};
	int x86 = 0;
#if defined(__x86_64__) || defined(__i386__)
	x86 = 1;
#endif
	/* the choice is about streaming from DRAM: a buffer a last-level cache
	 * of more than half its size holds measures the cache instead (on a
	 * Xeon VM with 480 MiB of L3, prefetcht0 won on this buffer by 10 %
	 * and lost on a 1.1 GB model by 25 %), so the vendor's choice stays */
	long llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
	llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
	int both = x86 && !shoal_kernels_prefetch_fixed() &&
	           (llc <= 0 || (size_t)llc * 2 <= PROBE_STREAM_BYTES);
	int pf0 = !strcmp(shoal_kernels_prefetch(), "l2");
	k->gemv(SHOAL_DTYPE_Q8_0, PROBE_STREAM_N, w, row, rows, xq, y);
	for (int pass = 0; pass < (both ? 4 : 2) || probe_now() < t_end; pass++) {
		int pf = both ? pass & 1 : pf0;
		if (both)
			shoal_kernels_set_prefetch(pf);
		double t0 = probe_now();
		k->gemv(SHOAL_DTYPE_Q8_0, PROBE_STREAM_N, w, row, rows, xq, y);
		double dt = probe_now() - t0;
		if (dt > 0 && (double)wbytes / dt > pf_best[pf])
			pf_best[pf] = (double)wbytes / dt;
	}
	if (both) {
		/* the vendor's choice stays unless the other is faster by 3 % */
		int other = !pf0;
		int pick = pf_best[other] > 1.03 * pf_best[pf0] ? other : pf0;
		shoal_kernels_set_prefetch(pick);
		best = pf_best[pick];
		out->gemv_gbps_other = pf_best[!pick] / 1e9;
	} else {
		best = pf_best[pf0];
	}
	out->gemv_gbps = best / 1e9;
	out->prefetch = shoal_kernels_prefetch();

	/* phase 2: compute, cache-resident; gemm's n is PROBE_GEMM_N, so the
	 * activation rows are the first PROBE_GEMM_N elements of each column */
	size_t grow = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, PROBE_GEMM_N);
	t_end = start + budget_ms * 1e-3;
	best = 0.0;
	float *yg = y; /* rows >= PROBE_GEMM_ROWS * PROBE_GEMM_COLS: reuse */
	do {
		double t0 = probe_now();
		k->gemm(SHOAL_DTYPE_Q8_0, PROBE_GEMM_N, w, grow, PROBE_GEMM_ROWS, xq, xrow,
		        PROBE_GEMM_COLS, yg, PROBE_GEMM_ROWS);
		double dt = probe_now() - t0;
		double flops = 2.0 * PROBE_GEMM_N * PROBE_GEMM_ROWS * PROBE_GEMM_COLS;
		if (dt > 0 && flops / dt > best)
			best = flops / dt;
	} while (probe_now() < t_end);
	out->gemm_gflops = best / 1e9;
	out->isa = k->isa;
	out->elapsed_ms = (unsigned)((probe_now() - start) * 1e3 + 0.5);
	munmap(w, wbytes);
	free(xf);
	free(xq);
	free(y);
	return SHOAL_OK;
}
