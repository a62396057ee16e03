/*
 * tests/unit/test_kernels_probe.c: the bandwidth meter and the start-up compute
 * probe give plausible figures, refuse bad arguments, and keep to their
 * budget (loosely: this machine is shared, so only gross overruns fail).
 */
#include <unistd.h>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_probe.h"
#include "runtime/cpu/membw.h"
#include "runtime/cpu/quant.h"
#include "tests/unit/test.h"

static void test_membw(void)
{
	ASSERT_TRUE(shoal_membw_read_gbps(0, 1 << 20) < 0);
	ASSERT_TRUE(shoal_membw_read_gbps(1, 100) < 0);
	/* 64 MiB: above most L3 slices; any machine reads > 0.1 GB/s and no
	 * single memory channel gives 10 TB/s */
	double g1 = shoal_membw_read_gbps(1, (size_t)64 << 20);
	double g2 = shoal_membw_read_gbps(2, (size_t)64 << 20);
	printf("  membw 64 MiB: 1 thread %.2f GB/s, 2 threads %.2f GB/s\n", g1, g2);
	ASSERT_TRUE(g1 > 0.1 && g1 < 10000);
	ASSERT_TRUE(g2 > 0.1 && g2 < 10000);
}

static void test_probe(void)
{
	shoal_kernels_probe_result r;
	const shoal_kernels *k = shoal_kernels_best();
	ASSERT_EQ(shoal_kernels_probe(k, 100, &r), SHOAL_OK);
	printf("  probe %s: gemv %.2f GB/s, gemm %.1f GFLOP/s, %u ms\n", r.isa, r.gemv_gbps,
	       r.gemm_gflops, r.elapsed_ms);
	ASSERT_STR_EQ(r.isa, k->isa);
	ASSERT_TRUE(r.gemv_gbps > 0.05 && r.gemv_gbps < 10000);
	ASSERT_TRUE(r.gemm_gflops > 0.05 && r.gemm_gflops < 100000);
	/* budget 100 ms; the setup and the minimum passes may add a little, and
	 * on this shared machine others' processes stretch it (up to 8x seen):
	 * 30x is a real overrun */
	ASSERT_LT(r.elapsed_ms, 3000);
	ASSERT_EQ(shoal_kernels_probe(NULL, 10, &r), SHOAL_OK); /* clamped to 50 ms */
	ASSERT_STR_EQ(r.isa, shoal_kernels_best()->isa);
	ASSERT_TRUE(r.gemv_gbps > 0);
	ASSERT_TRUE(r.prefetch && (!strcmp(r.prefetch, "l1") || !strcmp(r.prefetch, "l2")));
	ASSERT_STR_EQ(r.prefetch, shoal_kernels_prefetch());
}

/* The weight prefetch (kernels.h): set and read back, fixed by
 * SHOAL_PREFETCH (checked in a child), and never a bit of difference in any
 * table's gemv or gemm of a type with each loop (Q8_0, Q4_K) or attention. */
static void test_prefetch(void)
{
	const char *was = shoal_kernels_prefetch();
	ASSERT_TRUE(!strcmp(was, "l1") || !strcmp(was, "l2"));
#if defined(__x86_64__)
	shoal_kernels_set_prefetch(1);
	ASSERT_STR_EQ(shoal_kernels_prefetch(), "l2");
	shoal_kernels_set_prefetch(0);
	ASSERT_STR_EQ(shoal_kernels_prefetch(), "l1");
#endif
	ASSERT_EQ(shoal_kernels_prefetch_fixed(), getenv("SHOAL_PREFETCH") != NULL);
	enum { N = 1024, ROWS = 96, COLS = 3 };
	static const shoal_dtype types[] = {SHOAL_DTYPE_Q8_0, SHOAL_DTYPE_Q4_K};
	static const char *const isas[] = {"scalar", "avx2", "avx512bw",
	                                   "avx512", "neon", "neon-base"};
	float *x = malloc(sizeof(float) * N * COLS);
	float *wf = malloc(sizeof(float) * N * ROWS);
	ASSERT_TRUE(x && wf);
	for (int i = 0; i < N * COLS; i++)
		x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
	for (int i = 0; i < N * ROWS; i++)
		wf[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
	int compared = 0;
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		shoal_dtype wt = types[ti], at = shoal_kernels_act_type(wt);
		size_t wrow = shoal_dtype_row_bytes(wt, N), xrow = shoal_dtype_row_bytes(at, N);
		void *w = malloc(wrow * ROWS), *xq = malloc(xrow * COLS);
		ASSERT_TRUE(w && xq);
		for (int r = 0; r < ROWS; r++)
			shoal_quantize_row(wt, wf + (size_t)r * N, (char *)w + r * wrow, N);
		for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
			const shoal_kernels *k = shoal_kernels_by_name(isas[ii]);
			if (!k)
				continue;
			for (int c = 0; c < COLS; c++)
				k->quantize_act(at, x + c * N, (char *)xq + c * xrow, N);
			float y[2][ROWS * COLS], v[2][ROWS];
			for (int pf = 0; pf < 2; pf++) {
				shoal_kernels_set_prefetch(pf);
				k->gemm(wt, N, w, wrow, ROWS, xq, xrow, COLS, y[pf], ROWS);
				k->gemv(wt, N, w, wrow, ROWS, xq, v[pf]);
			}
			if (memcmp(y[0], y[1], sizeof y[0]) || memcmp(v[0], v[1], sizeof v[0]))
				TEST_FAIL_("%s %s: the prefetch changed a result", k->isa,
				           shoal_dtype_name(wt));
			compared++;
		}
		free(w);
		free(xq);
	}
	free(x);
	free(wf);
	ASSERT_TRUE(compared >= 2);
	shoal_kernels_set_prefetch(!strcmp(was, "l2"));
	/* SHOAL_PREFETCH fixes the choice (read once per process: a child) */
	char self[1024], cmd[1200];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len <= 0)
		TEST_SKIP("no /proc/self/exe to start the child from");
	self[len] = '\0';
	snprintf(cmd, sizeof cmd, "SHOAL_PREFETCH=l1 SHOAL_TEST_PREFETCH_CHILD=1 '%s' 2>&1", self);
	FILE *f = popen(cmd, "r");
	ASSERT_TRUE(f != NULL);
	{
		char line[256] = "";
		char *got = fgets(line, sizeof line, f);
		pclose(f);
		ASSERT_TRUE(got != NULL);
		ASSERT_STR_EQ(line, "l1 fixed\n");
	}
}

int main(void)
{
	/* the child of test_prefetch: what SHOAL_PREFETCH made of the choice */
	if (getenv("SHOAL_TEST_PREFETCH_CHILD")) {
		printf("%s %s\n", shoal_kernels_prefetch(),
		       shoal_kernels_prefetch_fixed() ? "fixed" : "chosen");
		return 0;
	}
	static const test_case_ cases[] = {TEST_CASE(test_membw), TEST_CASE(test_probe),
	                                   TEST_CASE(test_prefetch)};
	return test_run_(cases, sizeof cases / sizeof cases[0]);
}
