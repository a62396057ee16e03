/*
 * tests/bench/bench_kernels.c: the kernels' speed against the machine's
 * streaming-read bound (not a test: built by `make check`, run by hand).
 *
 * Usage: bench_kernels [MB [membw_MB]]   (defaults 200 and 512)
 * BENCH_TYPES=Q2_K,Q5_K and BENCH_ISAS=avx2,avx512 (comma lists) keep only
 * those weight types and tables in the per-type lines (and skip the
 * same-buffer, attention and probe lines), for a short run on a few kernels.
 * Prints Q8_0 gemv against a plain read of the same 256 MiB buffer (the
 * target figure), the 1-thread read bandwidth, then per table and type the
 * 1-thread gemv GB/s over a model-like set of matrices (alternating
 * 2048 -> 5632 and 5632 -> 2048, MB in all, far larger than the caches,
 * each used once per pass as in decoding), its ratio to the bound, the gemm
 * GFLOP/s on a cache-resident matrix (prefill), the gemv GB/s on that
 * matrix (thread CPU time: what the kernel reaches when memory is no
 * limit, little changed by other processes), attention at context 1024
 * in the 1.1B Llama's shape (22 layers x 4 KV heads, 8 query heads each,
 * head size 64: the ~46 MB F32 cache a decoded token reads), and the
 * start-up probe.
 * Figures are the best of several passes (interleaved with the bound's own
 * passes, the bound the best of the run): other processes only slow passes
 * down.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_probe.h"
#include "runtime/cpu/membw.h"
#include "runtime/cpu/quant.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A plain streaming sum over buf (what shoal_membw_read_gbps times), for
 * comparing gemv against a read of the very same bytes. */
static uint64_t read_sum(const unsigned char *p, size_t n)
{
	uint64_t a = 0, b = 0, c = 0, d = 0;
	const uint64_t *q = (const uint64_t *)p;
	for (size_t i = 0; i + 4 <= n / 8; i += 4) {
		a += q[i];
		b += q[i + 1];
		c += q[i + 2];
		d += q[i + 3];
	}
	return a + b + c + d;
}

/* The IQ grid types' quantizer searches the grid per group of 8 (~0.1-0.5
 * ms a super-block): their matrices hold BENCH_IQ_ROWS quantized rows,
 * repeated (the kernels' work does not depend on the values). */
#define BENCH_IQ_ROWS 16
static int bench_slow_quantizer(shoal_dtype t)
{
	return t == SHOAL_DTYPE_IQ2_XXS || t == SHOAL_DTYPE_IQ2_XS || t == SHOAL_DTYPE_IQ2_S ||
	       t == SHOAL_DTYPE_IQ3_XXS || t == SHOAL_DTYPE_IQ3_S || t == SHOAL_DTYPE_IQ1_S ||
	       t == SHOAL_DTYPE_IQ1_M;
}

static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* gemv of the best table over one large Q8_0 matrix against a plain read of
 * the same buffer, alternated 8 times, best of each; wall and thread CPU
 * time (the latter discounts time slices lost to other processes). */
static void same_buffer_ratio(void)
{
	const shoal_kernels *k = shoal_kernels_best();
	int64_t n = 4096;
	size_t rb = shoal_dtype_row_bytes(SHOAL_DTYPE_Q8_0, (uint64_t)n);
	int64_t rows = (int64_t)(((size_t)256 << 20) / rb);
	unsigned char *w = malloc(rb * (size_t)rows), *x = malloc(rb);
	float *f = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)rows);
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)((i * 37) % 101 - 50) / 50.0f;
	for (int64_t r = 0; r < rows; r++)
		shoal_quantize_row(SHOAL_DTYPE_Q8_0, f, w + (size_t)r * rb, n);
	k->quantize_act(SHOAL_DTYPE_Q8_0, f, x, n);
	double rw = 1e30, rc = 1e30, gw = 1e30, gc = 1e30;
	volatile uint64_t sink = 0;
	for (int p = 0; p < 8; p++) {
		double w0 = now(), c0 = cpu_now();
		sink += read_sum(w, rb * (size_t)rows);
		double dw = now() - w0, dc = cpu_now() - c0;
		rw = dw < rw ? dw : rw;
		rc = dc < rc ? dc : rc;
		w0 = now();
		c0 = cpu_now();
		k->gemv(SHOAL_DTYPE_Q8_0, n, w, rb, rows, x, y);
		dw = now() - w0;
		dc = cpu_now() - c0;
		gw = dw < gw ? dw : gw;
		gc = dc < gc ? dc : gc;
	}
	double gb = (double)(rb * (size_t)rows) / 1e9;
	printf("same 256 MiB buffer, %s: read %.2f GB/s, Q8_0 gemv %.2f GB/s = %.0f%% (wall); "
	       "%.0f%% (thread CPU time)\n",
	       k->isa, gb / rw, gb / gw, 100.0 * rw / gw, 100.0 * rc / gc);
	free(w);
	free(x);
	free(f);
	free(y);
}

/* Whether name is in the comma list env (unset or empty: every name). */
static int listed(const char *env, const char *name)
{
	const char *l = getenv(env);
	if (!l || !*l)
		return 1;
	size_t n = strlen(name);
	for (const char *p = l; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, name, n))
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

static float frand(unsigned *s)
{
	*s = *s * 1664525u + 1013904223u;
	return (float)(*s >> 8) / (float)(1u << 23) - 1.0f;
}

typedef struct mat {
	int64_t n, rows;
	size_t row_bytes;
	unsigned char *w;
} mat;

/* One decode token's attention over a context of n in the 1.1B Llama's
 * shape, by table k: the best of 5 passes, the three phases timed apart. */
static void bench_attention(const shoal_kernels *k, int n)
{
	enum { L = 22, KV = 4, NG = 8, HD = 64 };
	const size_t ld = (size_t)KV * HD, c = (size_t)n + 16;
	float *K = malloc(sizeof(float) * L * (size_t)n * ld);
	float *V = malloc(sizeof(float) * L * (size_t)n * ld);
	float *q = malloc(sizeof(float) * KV * NG * HD), *o = malloc(sizeof(float) * KV * NG * HD);
	float *s = malloc(sizeof(float) * NG * c);
	if (!K || !V || !q || !o || !s) {
		printf("attention: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < L * (size_t)n * ld; i++) {
		K[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
		V[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
	}
	for (int i = 0; i < KV * NG * HD; i++)
		q[i] = (float)(i % 97) / 97.0f - 0.5f;
	double best = 1e30, bs = 0, bm = 0, bv = 0;
	for (int pass = 0; pass < 5; pass++) {
		double ts = 0, tm = 0, tv = 0, t0 = now();
		for (int l = 0; l < L; l++)
			for (int h = 0; h < KV; h++) {
				const float *kc = K + (size_t)l * n * ld + (size_t)h * HD;
				const float *vc = V + (size_t)l * n * ld + (size_t)h * HD;
				double a = now();
				k->attn_scores(q + h * NG * HD, NG, HD, kc, ld, n, 0.125f, s, c);
				double b = now();
				for (int g = 0; g < NG; g++)
					k->softmax(s + (size_t)g * c, n);
				double d = now();
				k->attn_values(s, c, NG, HD, vc, ld, n, o + h * NG * HD);
				double e = now();
				ts += b - a;
				tm += d - b;
				tv += e - d;
			}
		double dt = now() - t0;
		if (dt < best) {
			best = dt;
			bs = ts;
			bm = tm;
			bv = tv;
		}
	}
	printf("%-9s attention at context %d: %.2f ms (scores %.2f, softmax %.2f, values %.2f), "
	       "cache read at %.1f GB/s\n",
	       k->isa, n, best * 1e3, bs * 1e3, bm * 1e3, bv * 1e3,
	       2.0 * L * (double)n * (double)ld * sizeof(float) / best / 1e9);
out:
	free(K);
	free(V);
	free(q);
	free(o);
	free(s);
}

int main(int argc, char **argv)
{
	size_t mb = argc > 1 ? (size_t)atol(argv[1]) : 200;
	size_t bw_mb = argc > 2 ? (size_t)atol(argv[2]) : 512;
	const char *filt = getenv("BENCH_TYPES"), *filt2 = getenv("BENCH_ISAS");
	const int filtered = (filt && *filt) || (filt2 && *filt2);
	if (!filtered)
		same_buffer_ratio();
	double bound = 0;
	for (int r = 0; r < 3; r++) {
		double g = shoal_membw_read_gbps(1, bw_mb << 20);
		bound = g > bound ? g : bound;
	}
	printf("membw 1 thread (%zu MiB): %.2f GB/s (best of 3 calls)\n", bw_mb, bound);
	static const char *const isas[] = {"scalar", "avx2", "avx512bw",
	                                   "avx512", "neon", "neon-base"};
	static const shoal_dtype types[] = {
	    SHOAL_DTYPE_Q8_0,    SHOAL_DTYPE_Q4_0,    SHOAL_DTYPE_Q4_K,   SHOAL_DTYPE_Q6_K,
	    SHOAL_DTYPE_F16,     SHOAL_DTYPE_Q5_0,    SHOAL_DTYPE_Q5_1,   SHOAL_DTYPE_IQ4_NL,
	    SHOAL_DTYPE_MXFP4,   SHOAL_DTYPE_Q2_K,    SHOAL_DTYPE_Q3_K,   SHOAL_DTYPE_Q5_K,
	    SHOAL_DTYPE_IQ4_XS,  SHOAL_DTYPE_IQ2_XXS, SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S,
	    SHOAL_DTYPE_IQ3_XXS, SHOAL_DTYPE_IQ3_S,   SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};
	unsigned seed = 1;
	float *xf = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 8192 * 8);
	for (int i = 0; i < 8192; i++)
		xf[i] = frand(&seed);
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		shoal_dtype wt = types[t], at = shoal_kernels_act_type(wt);
		if (!listed("BENCH_TYPES", shoal_dtype_name(wt)))
			continue;
		/* build the matrix set once per type: random rows, quantized */
		size_t per = shoal_dtype_row_bytes(wt, 2048) * 5632; /* both shapes */
		int nm = (int)((mb << 20) / per);
		if (nm < 2)
			nm = 2;
		mat *m = calloc((size_t)nm, sizeof *m);
		size_t total = 0;
		for (int i = 0; i < nm; i++) {
			m[i].n = i % 2 ? 5632 : 2048;
			m[i].rows = i % 2 ? 2048 : 5632;
			m[i].row_bytes = shoal_dtype_row_bytes(wt, (uint64_t)m[i].n);
			m[i].w = malloc(m[i].row_bytes * (size_t)m[i].rows);
			for (int64_t r = 0; r < m[i].rows; r++) {
				if (r >= BENCH_IQ_ROWS && bench_slow_quantizer(wt)) {
					memcpy(m[i].w + (size_t)r * m[i].row_bytes,
					       m[i].w +
					           (size_t)(r % BENCH_IQ_ROWS) * m[i].row_bytes,
					       m[i].row_bytes);
					continue;
				}
				float row[5632];
				for (int64_t j = 0; j < m[i].n; j++)
					row[j] = frand(&seed);
				shoal_quantize_row(wt, row, m[i].w + (size_t)r * m[i].row_bytes,
				                   m[i].n);
			}
			total += m[i].row_bytes * (size_t)m[i].rows;
		}
		unsigned char *xa = malloc(shoal_dtype_row_bytes(at, 5632) * 8);
		unsigned char *xb = malloc(shoal_dtype_row_bytes(at, 2048) * 8);
		for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
			const shoal_kernels *kt = shoal_kernels_by_name(isas[k]);
			if (!kt || (!strcmp(isas[k], "scalar") && wt == SHOAL_DTYPE_F16) ||
			    !listed("BENCH_ISAS", isas[k]))
				continue;
			kt->quantize_act(at, xf, xa, 5632);
			kt->quantize_act(at, xf, xb, 2048);
			double best = 1e30;
			for (int pass = 0; pass < (strcmp(isas[k], "scalar") ? 5 : 2); pass++) {
				double t0 = now();
				for (int i = 0; i < nm; i++)
					kt->gemv(wt, m[i].n, m[i].w, m[i].row_bytes, m[i].rows,
					         m[i].n == 5632 ? xa : xb, y);
				double dt = now() - t0;
				if (dt < best)
					best = dt;
			}
			double gbps = (double)total / best / 1e9;
			if (strcmp(isas[k], "scalar")) {
				/* alternate bound and gemv so both get the machine's
				 * quiet moments, best of each (the bound the best of
				 * the whole run) */
				for (int r = 0; r < 4; r++) {
					double g = shoal_membw_read_gbps(1, bw_mb << 20);
					bound = g > bound ? g : bound;
					double t0 = now();
					for (int i = 0; i < nm; i++)
						kt->gemv(wt, m[i].n, m[i].w, m[i].row_bytes,
						         m[i].rows, m[i].n == 5632 ? xa : xb, y);
					double dt = now() - t0;
					best = dt < best ? dt : best;
				}
				gbps = (double)total / best / 1e9;
				if (wt == SHOAL_DTYPE_Q8_0)
					printf("  (interleaved with membw: bound now %.2f GB/s)\n",
					       bound);
			}
			/* gemm: 8 columns against the first 256 rows of matrix 0 (cache) */
			size_t xs = shoal_dtype_row_bytes(at, 2048);
			for (int c = 1; c < 8; c++)
				memcpy(xb + (size_t)c * xs, xb, xs);
			double gbest = 1e30;
			for (int rep = 0; rep < 20; rep++) {
				double t0 = now();
				kt->gemm(wt, 2048, m[0].w, m[0].row_bytes, 256, xb, xs, 8, y, 256);
				double dt = now() - t0;
				if (dt < gbest)
					gbest = dt;
			}
			/* the same gemv on 256 rows of matrix 0 (in L2): what the
			 * kernel reaches when memory is no limit, timed in thread
			 * CPU time, so that other processes on the machine change
			 * it little; a kernel whose figure here is not well above
			 * the bound cannot reach it */
			double hbest = 1e30;
			for (int rep = 0; rep < 40; rep++) {
				double t0 = cpu_now();
				for (int k2 = 0; k2 < 8; k2++)
					kt->gemv(wt, 2048, m[0].w, m[0].row_bytes, 256, xb, y);
				double dt = cpu_now() - t0;
				hbest = dt < hbest ? dt : hbest;
			}
			printf("%-9s %-5s gemv %6.2f GB/s (%5.1f%% of bound, %zu MiB)  gemm %6.1f "
			       "GFLOP/s  in cache %6.2f GB/s\n",
			       kt->isa, shoal_dtype_name(wt), gbps, 100.0 * gbps / bound,
			       total >> 20, 2.0 * 2048 * 256 * 8 / gbest / 1e9,
			       8.0 * (double)(m[0].row_bytes * 256) / hbest / 1e9);
		}
		for (int i = 0; i < nm; i++)
			free(m[i].w);
		free(m);
		free(xa);
		free(xb);
	}
	if (filtered) {
		free(xf);
		free(y);
		return 0;
	}
	for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
		const shoal_kernels *kt = shoal_kernels_by_name(isas[k]);
		if (kt && strcmp(isas[k], "scalar"))
			bench_attention(kt, 1024);
	}
	shoal_kernels_probe_result pr;
	if (shoal_kernels_probe(NULL, 250, &pr) == SHOAL_OK)
		printf("probe (%s, %u ms): gemv %.2f GB/s, gemm %.1f GFLOP/s\n", pr.isa,
		       pr.elapsed_ms, pr.gemv_gbps, pr.gemm_gflops);
	free(xf);
	free(y);
	return 0;
}
