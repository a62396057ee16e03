/*
 * runtime/node/node_probe.c: the compute probe (runtime/cpu/kernels_probe.h)
 * and what keeps its figures honest: kept in the state directory across
 * restarts, marked when taken under load, and retaken once the machine is
 * quiet. Node thread.
 *
 * Part: runtime/ (node). Called by node_record.c (the first figures) and
 * node.c (the retake tick); calls no other node file.
 *
 * Why: three identical peers started together on one busy machine
 * measured 3.56, 9.99 and 11.16 GB/s, and the 3.56 was kept for a week:
 * that peer got 1 layer of 6. A probe is "under load" when its thread had
 * less than SHOAL_NODE_PROBE_CORE_MIN of a core (another task shared it)
 * or other processes kept more than node_probe_quiet() cores busy
 * meanwhile (they share the memory bandwidth a mat-vec measures). Such a
 * figure is published (there is no better one yet), kept with a mark, and
 * measured again when, over a whole SHOAL_NODE_RETAKE_MULT period, the
 * machine (this process included) kept fewer than node_probe_quiet() cores
 * busy; a retake that is itself under load waits for the next quiet
 * period. A figure not marked but wrong all the same (taken on a machine
 * loaded in a way the probe did not see, or kept from before a change)
 * is measured again when the engine contradicts it: this peer's stage's
 * decode runs off the plan's prediction by more than 2x for long
 * (runtime/node/timing.h, serve_timing.c); the new figure replaces it when
 * it moved toward what the engine says (node__probe_engine_check), at
 * most once in SHOAL_NODE_ENGINE_CHECK_US. SHOAL_PROBE_RETAKE=0 turns
 * retakes and these checks off (the test suite's nodes, whose plans must
 * not move under them while other tests run).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/statedir.h"
#include "runtime/cpu/kernels_probe.h"
#include "runtime/node/node_impl.h"

/* The compute probe: runtime/cpu/kernels_probe.h measures the best kernel
 * table's quantized mat-vec (decode, memory-bound: GB/s) and mat-mul
 * (prefill: GFLOP/s) on one thread. SHOAL_NODE_PROBE_MS = 150 ms: a start-up
 * cost nobody notices, long enough for a few passes over a matrix larger
 * than the caches. */
#define SHOAL_NODE_PROBE_MS 150u

/* The figures are kept in the state directory (SHOAL_NODE_PROBE_FILE: one
 * line "shoal-probe 3 ISA MB_S MFLOPS UNIX_SECONDS PREFETCH [LOADED]", the
 * prefetch the weight prefetch the probe chose, kernels.h, LOADED 1 when
 * it was taken under load (absent in files of earlier versions: 0); a
 * line of an older version is measured again: version 3 came with the
 * AVX-512 row-group kernels, whose mat-mul is ~3x version 2's, so an
 * upgraded peer must not publish its old figure; bump it whenever the
 * kernels' speed changes that much) and used again by the next start on
 * the same kernels within SHOAL_NODE_PROBE_KEEP_S, unless --reprobe: a
 * restarted peer then publishes the record it had, so its peers' plan
 * still holds and a restart changes no plan (a new measurement differs by
 * a few percent and may tip the layer split). */
#define SHOAL_NODE_PROBE_FILE   "probe"
#define SHOAL_NODE_PROBE_KEEP_S (7u * 24 * 3600)
/* under load: the probe's thread ran less than this share of the time */
#define SHOAL_NODE_PROBE_CORE_MIN 0.85

/* Cores others may keep busy for a machine to count as quiet: half a core
 * on a small machine, a quarter of the cores on a larger one. */
static double node_probe_quiet(const shoal_node *n)
{
	double q = 0.25 * (double)(n->si.cores ? n->si.cores : 1);
	return q > 0.5 ? q : 0.5;
}

/* SHOAL_TEST_QUIET=1 (test builds): the machine counts as quiet, so a
 * test can show a retake while other tests load the machine; the load
 * itself is detected for real (tests/sh/probe_retake.sh). */
static bool node_probe_test_quiet(void)
{
#ifdef SHOAL_TEST_HOOKS
	const char *q = getenv("SHOAL_TEST_QUIET");
	return q && !strcmp(q, "1");
#else
	return false;
#endif
}

static bool node_probe_load(shoal_node *n, shoal_record *r)
{
	char path[1100], isa[32], pf[8];
	snprintf(path, sizeof path, "%s/%s", n->state_dir, SHOAL_NODE_PROBE_FILE);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	unsigned long long mb = 0, mf = 0, at = 0;
	int loaded = 0;
	int k =
	    fscanf(f, "shoal-probe 3 %31s %llu %llu %llu %7s %d", isa, &mb, &mf, &at, pf, &loaded);
	fclose(f);
	time_t now = time(NULL);
	if (k < 5 || strcmp(isa, shoal_kernels_best()->isa) || !mb || !mf ||
	    at > (unsigned long long)now ||
	    (unsigned long long)now - at > SHOAL_NODE_PROBE_KEEP_S ||
	    (strcmp(pf, "l1") && strcmp(pf, "l2")))
		return false;
	if (!shoal_kernels_prefetch_fixed())
		shoal_kernels_set_prefetch(!strcmp(pf, "l2"));
	r->compute_mb_s = mb;
	r->compute_mflops = mf;
	n->probe_loaded = k == 6 && loaded == 1;
	SHOAL_LOG_I("node",
	            "compute probe (%s, kept from %llu s ago%s; --reprobe measures again): "
	            "%.2f GB/s mat-vec, %.2f GFLOP/s mat-mul, weight prefetch %s",
	            isa, (unsigned long long)now - at,
	            n->probe_loaded ? ", taken under load: retaken when the machine is quiet" : "",
	            (double)mb / 1000.0, (double)mf / 1000.0, shoal_kernels_prefetch());
	return true;
}

static void node_probe_keep(shoal_node *n, const shoal_kernels_probe_result *res,
                            const shoal_record *r)
{
	char path[1100], line[160], why[SHOAL_WHY_WRAP_LEN];
	snprintf(path, sizeof path, "%s/%s", n->state_dir, SHOAL_NODE_PROBE_FILE);
	int len = snprintf(line, sizeof line, "shoal-probe 3 %s %llu %llu %llu %s %d\n",
	                   res->isa ? res->isa : "?", (unsigned long long)r->compute_mb_s,
	                   (unsigned long long)r->compute_mflops, (unsigned long long)time(NULL),
	                   res->prefetch, n->probe_loaded ? 1 : 0);
	if (len > 0 && (size_t)len < sizeof line &&
	    shoal_file_replace(path, line, (size_t)len, false, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("node", "cannot keep the compute figures: %s", why);
}

static double node_probe_thread_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Measure; false when the probe failed. *loaded: it ran under load, with
 * what it saw in why[]. */
static bool node_probe_measure(shoal_node *n, shoal_kernels_probe_result *res, bool *loaded,
                               char *why, size_t why_len)
{
	shoal_sysinfo_cpu a, b;
	double others, self;
	shoal_sysinfo_cpu_sample(&a);
	double t0 = node_probe_thread_s();
	if (shoal_kernels_probe(NULL, SHOAL_NODE_PROBE_MS, res) != SHOAL_OK)
		return false;
	double t1 = node_probe_thread_s();
	shoal_sysinfo_cpu_sample(&b);
	shoal_sysinfo_cpu_busy(&a, &b, &others, &self);
	double share = b.wall_s > a.wall_s ? (t1 - t0) / (b.wall_s - a.wall_s) : 1.0;
	*loaded = (share < SHOAL_NODE_PROBE_CORE_MIN || others > node_probe_quiet(n)) &&
	          !node_probe_test_quiet();
	snprintf(why, why_len, "its thread had %.0f%% of a core; others kept %.1f cores busy",
	         100.0 * share, others < 0 ? 0.0 : others);
	return true;
}

void node__probe_compute(shoal_node *n, shoal_record *r)
{
	const char *rt = getenv("SHOAL_PROBE_RETAKE");
	n->probe_retake = !(rt && !strcmp(rt, "0"));
	shoal_sysinfo_cpu_sample(&n->probe_cpu);
	n->probe_next_us = shoal_clock_now_us() + SHOAL_NODE_RETAKE_MULT * n->base_us;
	if (!n->cfg.reprobe && node_probe_load(n, r))
		return;
	shoal_kernels_probe_result res;
	char seen[160];
	bool loaded;
	if (!node_probe_measure(n, &res, &loaded, seen, sizeof seen)) {
		SHOAL_LOG_W("node", "compute probe failed (out of memory); publishing 0");
		return;
	}
	r->compute_mb_s = (uint64_t)(res.gemv_gbps * 1000.0);     /* GB/s -> MB/s */
	r->compute_mflops = (uint64_t)(res.gemm_gflops * 1000.0); /* GFLOP/s -> MFLOP/s */
	n->probe_loaded = loaded;
	SHOAL_LOG_I("node",
	            "compute probe (%s, %u ms): %.2f GB/s mat-vec, %.2f GFLOP/s mat-mul, "
	            "weight prefetch %s (the other: %.2f GB/s)",
	            res.isa ? res.isa : "?", res.elapsed_ms, res.gemv_gbps, res.gemm_gflops,
	            res.prefetch, res.gemv_gbps_other);
	if (loaded)
		SHOAL_LOG_W("node",
		            "the compute probe ran under load (%s): its figures may be low; "
		            "%s",
		            seen,
		            n->probe_retake ? "measuring again when the machine is quiet"
		                            : "SHOAL_PROBE_RETAKE=0: kept as it is");
	node_probe_keep(n, &res, r);
}

/* Checks against the engine (node__probe_engine_check) at most once in this
 * long: a gap the probe cannot explain (the cost model misses work, the
 * machine is busy) would otherwise re-measure with every new plan. */
#define SHOAL_NODE_ENGINE_CHECK_US (600ull * 1000000u)
/* A new figure replaces the kept one when it moved toward what the engine
 * says by more than this factor. */
#define SHOAL_NODE_ENGINE_MOVE 1.25

bool node__probe_engine_check(shoal_node *n, double ratio)
{
	uint64_t now = shoal_clock_now_us();
	if (!n->probe_retake ||
	    (n->probe_engine_us && now - n->probe_engine_us < SHOAL_NODE_ENGINE_CHECK_US))
		return false;
	n->probe_engine_us = now;
	shoal_kernels_probe_result res;
	char seen[160];
	bool loaded;
	shoal_record *r = &n->rec;
	double was = (double)r->compute_mb_s / 1000.0;
	if (!node_probe_measure(n, &res, &loaded, seen, sizeof seen))
		return false;
	shoal_sysinfo_cpu_sample(&n->probe_cpu);
	/* slower runs than predicted: the figure is high; faster: low */
	bool moved = ratio > 1.0 ? res.gemv_gbps * SHOAL_NODE_ENGINE_MOVE < was
	                         : res.gemv_gbps > was * SHOAL_NODE_ENGINE_MOVE;
	if (!moved) {
		SHOAL_LOG_I("node",
		            "decode runs take %.2fx the plan's prediction, but the compute probe "
		            "measures %.2f GB/s again (kept: %.2f): the figure stays",
		            ratio, res.gemv_gbps, was);
		return false;
	}
	r->compute_mb_s = (uint64_t)(res.gemv_gbps * 1000.0);
	r->compute_mflops = (uint64_t)(res.gemm_gflops * 1000.0);
	if (r->n_devices && !strcmp(r->devices[0].backend, "cpu")) {
		r->devices[0].read_mb_s = r->compute_mb_s;
		r->devices[0].mflops = r->compute_mflops;
	}
	n->probe_loaded = loaded;
	SHOAL_LOG_W("node",
	            "decode runs take %.2fx the plan's prediction: the compute figure %.2f GB/s "
	            "was wrong; measured again (%s%s): %.2f GB/s mat-vec, %.2f GFLOP/s "
	            "mat-mul; publishing it",
	            ratio, was, seen, loaded ? ", under load: retaken when quiet" : "",
	            res.gemv_gbps, res.gemm_gflops);
	node_probe_keep(n, &res, r);
	return true;
}

bool node__probe_retake_tick(shoal_node *n)
{
	uint64_t now = shoal_clock_now_us();
	if (!n->probe_loaded || !n->probe_retake || now < n->probe_next_us)
		return false;
	n->probe_next_us = now + SHOAL_NODE_RETAKE_MULT * n->base_us;
	shoal_sysinfo_cpu c;
	double others, self;
	shoal_sysinfo_cpu_sample(&c);
	shoal_sysinfo_cpu_busy(&n->probe_cpu, &c, &others, &self);
	n->probe_cpu = c;
	if ((others < 0 || others + self > node_probe_quiet(n)) && !node_probe_test_quiet())
		return false; /* not quiet (or cannot tell): the next period */
	shoal_kernels_probe_result res;
	char seen[160];
	bool loaded;
	if (!node_probe_measure(n, &res, &loaded, seen, sizeof seen) || loaded) {
		shoal_sysinfo_cpu_sample(&n->probe_cpu);
		return false;
	}
	shoal_sysinfo_cpu_sample(&n->probe_cpu); /* the probe's own time is not load */
	shoal_record *r = &n->rec;
	uint64_t was = r->compute_mb_s;
	r->compute_mb_s = (uint64_t)(res.gemv_gbps * 1000.0);
	r->compute_mflops = (uint64_t)(res.gemm_gflops * 1000.0);
	if (r->n_devices && !strcmp(r->devices[0].backend, "cpu")) {
		r->devices[0].read_mb_s = r->compute_mb_s;
		r->devices[0].mflops = r->compute_mflops;
	}
	n->probe_loaded = false;
	SHOAL_LOG_I("node",
	            "compute probe retaken on a quiet machine (%s): %.2f GB/s mat-vec (was %.2f "
	            "under load), %.2f GFLOP/s mat-mul; publishing it",
	            seen, res.gemv_gbps, (double)was / 1000.0, res.gemm_gflops);
	node_probe_keep(n, &res, r);
	return true;
}
