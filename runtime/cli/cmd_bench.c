/*
 * runtime/cli/cmd_bench.c: `shoal bench MODEL`: prefill and decode speed on this
 * machine, and how close decoding comes to the memory-bandwidth bound.
 *
 * Part: runtime/ (CLI). Decoding one token reads every weight once, so its
 * speed is bounded by bandwidth / bytes per token. Bytes per token: every
 * tensor except token_embd plus one embedding row; with a tied head,
 * token_embd whole (it is the head); for MoE layers only n_expert_used of
 * n_expert experts' bytes. Token ids are synthetic (no tokenizer needed).
 * The weights are touched once before timing, so page faults of the
 * mapping are not counted. The bandwidth is the best of several passes, so
 * next to the mean decode speed we give the fastest token's and the speed
 * per CPU-second, the figures comparable when other processes share the
 * machine.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/clock.h"
#include "models/model.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/kernels_probe.h"
#include "runtime/backend.h"
#include "runtime/backends.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/engine/draft_kinds.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generate.h"

static void bench_usage(FILE *f)
{
	fprintf(f, "usage: shoal bench MODEL [--threads T] [--prompt N[,N...]] [--gen N]\n"
	           "                   [--depth D[,D...]] [--kv-type f16|f32] [--backend B]\n"
	           "                   [--speculate MODE] [--draft-max K] [--json]\n"
	           "  --threads T       compute threads (default 1)\n");
	cli__backend_usage(f, 20);
	fprintf(f, "  --prompt N,...    prefill runs of N tokens each (default 64)\n"
	           "  --gen N           decoded tokens per decode run (default 32)\n"
	           "  --depth D,...     decode runs after D tokens of context (default 0)\n"
	           "  --kv-type T       KV cache elements, f16 (default) or f32\n"
	           "  --speculate MODE  decode runs with exact speculation: auto or lookup\n"
	           "                    (prompt lookup), off (default); the ids drafted and\n"
	           "                    kept are counted\n"
	           "  --draft-max K     ids drafted per step at most, 1..16 (default 8)\n"
	           "  --json            one JSON object: every run, the token-time median and\n"
	           "                    spread, bytes per token, the bandwidth bound, prefill\n"
	           "                    GFLOP/s (2 x the weights a token multiplies; attention\n"
	           "                    not counted) and the peak resident memory (the\n"
	           "                    bandwidth probe's buffer included)\n");
}

/* Bytes one decode step reads and the weights it multiplies (see the
 * header comment). */
static uint64_t bench_bytes_per_token(const shoal_model *m, uint64_t *elems)
{
	const shoal_hparams *hp = &m->hp;
	uint64_t sum = 0, el = 0;
	size_t n = shoal_gguf_n_tensors(m->gguf);
	for (size_t i = 0; i < n; i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(m->gguf, i);
		if (t == m->tok_embd)
			continue;
		uint64_t ne = 1;
		for (int d = 0; d < 4; d++)
			ne *= t->ne[d] ? t->ne[d] : 1;
		if (hp->n_expert && t->ne[2] == hp->n_expert && strstr(t->name, "_exps")) {
			sum += t->nbytes / hp->n_expert * hp->n_expert_used;
			el += ne / hp->n_expert * hp->n_expert_used;
		} else {
			sum += t->nbytes;
			if (t->n_dims >= 2)
				el += ne;
		}
	}
	if (hp->tied_head) {
		sum += m->tok_embd->nbytes;
		el += (uint64_t)m->tok_embd->ne[0] * m->tok_embd->ne[1];
	} else {
		sum += m->tok_embd->nbytes / hp->n_vocab;
	}
	*elems = el;
	return sum;
}

/* A comma list of numbers in [lo, 65536] into out[cap]; how many, or -1. */
static int bench_list(const char *s, long lo, long *out, int cap)
{
	int n = 0;
	while (*s && n < cap) {
		char *end;
		errno = 0;
		long v = strtol(s, &end, 10);
		if (errno || end == s || v < lo || v > 65536 || (*end && *end != ','))
			return -1;
		out[n++] = v;
		s = *end ? end + 1 : end;
	}
	return *s ? -1 : n;
}

/* Token times of a decode run: the gap between consecutive tokens handed
 * out (the first one follows the prefill: not a decode step). */
typedef struct shoal_bench_times {
	uint64_t last_ns;
	uint64_t *gap_ns;
	size_t n, cap;
} shoal_bench_times;

static int bench_on_token(void *ctx, const shoal_gen_token *t)
{
	(void)t;
	shoal_bench_times *bt = ctx;
	uint64_t now = shoal_clock_now_ns();
	if (bt->last_ns && bt->n < bt->cap)
		bt->gap_ns[bt->n++] = now - bt->last_ns;
	bt->last_ns = now;
	return 0;
}

static int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#define SHOAL_BENCH_MAX_RUNS 8

int shoal_cmd_bench(int argc, char **argv)
{
	const char *model = NULL;
	long threads = 1, n_gen = 32, prompts[SHOAL_BENCH_MAX_RUNS] = {64},
	     depths[SHOAL_BENCH_MAX_RUNS] = {0};
	int n_prompts = 1, n_depths = 1;
	bool json = false;
	shoal_dtype kv_type = SHOAL_DTYPE_F16;
	const char *backend_name = NULL; /* "auto" */
	const shoal_backend_ops *backend = NULL;
	shoal_speculate_kind spec = SHOAL_SPECULATE_OFF;
	long draft_max = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		long *dst = NULL;
		if (!strcmp(a, "--threads") || !strcmp(a, "-t"))
			dst = &threads;
		else if (!strcmp(a, "--draft-max"))
			dst = &draft_max;
		else if (!strcmp(a, "--speculate")) {
			char sw[SHOAL_WHY_LEN];
			if (i + 1 >= argc ||
			    shoal_speculate_parse(argv[++i], &spec, sw, sizeof sw) ||
			    shoal_speculate_check(spec, sw, sizeof sw)) {
				fprintf(stderr, "shoal bench: %s\n",
				        i < argc ? sw : "--speculate needs a mode");
				return 2;
			}
			continue;
		} else if (!strcmp(a, "--gen"))
			dst = &n_gen;
		else if (!strcmp(a, "--prompt") || !strcmp(a, "--depth")) {
			bool pr = !strcmp(a, "--prompt");
			int k = i + 1 < argc
			            ? bench_list(argv[++i], pr ? 1 : 0, pr ? prompts : depths,
			                         SHOAL_BENCH_MAX_RUNS)
			            : -1;
			if (k < 1) {
				fprintf(stderr,
				        "shoal bench: %s needs numbers in [%d, 65536], at most %d, "
				        "comma-separated\n",
				        a, pr ? 1 : 0, SHOAL_BENCH_MAX_RUNS);
				return 2;
			}
			*(pr ? &n_prompts : &n_depths) = k;
			continue;
		} else if (!strcmp(a, "--kv-type")) {
			if (i + 1 >= argc || !cli__kv_type(argv[++i], &kv_type)) {
				fprintf(stderr, "shoal bench: --kv-type takes f16 or f32\n");
				return 2;
			}
			continue;
		} else if (!strcmp(a, "--backend")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "shoal bench: --backend needs a name\n");
				return 2;
			}
			backend_name = argv[++i];
			continue;
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			bench_usage(stdout);
			return 0;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shoal bench: unknown option %s\n", a);
			bench_usage(stderr);
			return 2;
		} else if (!model)
			model = a;
		else {
			fprintf(stderr, "shoal bench: unexpected argument %s\n", a);
			return 2;
		}
		if (dst) {
			char *end;
			errno = 0;
			long v = i + 1 < argc ? strtol(argv[++i], &end, 10) : -1;
			if (i >= argc || errno || *end || v < 1 || v > 65536) {
				fprintf(stderr, "shoal bench: %s needs a number in [1, 65536]\n",
				        a);
				return 2;
			}
			*dst = v;
		}
	}
	if (draft_max > SHOAL_SPECULATE_DRAFT_MAX_MAX) {
		fprintf(stderr, "shoal bench: --draft-max wants 1..%u\n",
		        SHOAL_SPECULATE_DRAFT_MAX_MAX);
		return 2;
	}
	if (!model) {
		bench_usage(stderr);
		return 2;
	}
	if (!cli__backend("shoal bench", backend_name, &backend))
		return 2;
	long max_prompt = 1, max_ctx = 1;
	for (int k = 0; k < n_prompts; k++)
		if (prompts[k] > max_prompt)
			max_prompt = prompts[k];
	for (int k = 0; k < n_depths; k++)
		if (depths[k] + n_gen + 2 > max_ctx)
			max_ctx = depths[k] + n_gen + 2;
	if (max_prompt + 1 > max_ctx)
		max_ctx = max_prompt + 1;

	char why[SHOAL_WHY_LEN] = "";
	int status = 1;
	shoal_model *m = NULL;
	shoal_engine *eng = NULL;
	shoal_gen *gen = NULL;
	int32_t *toks = NULL;
	uint64_t *gaps = NULL;
	shoal_err err = shoal_model_open(model, &m, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal bench: %s: %s\n", model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = backend;
	cfg.n_threads = (uint32_t)threads;
	cfg.n_ctx = (uint32_t)max_ctx;
	cfg.kv_type = kv_type;
	cfg.max_rows = (uint32_t)(max_prompt < 512 ? max_prompt : 512);
	err = shoal_engine_new(m, &cfg, &eng, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal bench: %s: %s\n", model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	uint32_t n_vocab = m->hp.n_vocab;
	shoal_gen_config gc = {.sampler = shoal_sampler_defaults(),
	                       .speculate = spec != SHOAL_SPECULATE_OFF};
	gc.sampler.temp = 0; /* greedy */
	if ((err = shoal_gen_new(eng, &gc, &gen, why, sizeof why)))
		goto fail_run;
	toks = malloc((size_t)max_ctx * sizeof *toks);
	gaps = malloc((size_t)n_gen * sizeof *gaps);
	if (!toks || !gaps) {
		fprintf(stderr, "shoal bench: out of memory\n");
		goto out;
	}
	/* synthetic ids spread over the vocabulary (7919 is prime) */
	for (long p = 0; p < max_ctx; p++)
		toks[p] = (int32_t)(((uint64_t)p * 7919 + 1) % n_vocab);

	/* the weight prefetch, chosen as a node chooses it (kernels_probe.h) */
	shoal_kernels_probe_result pr;
	if (shoal_kernels_probe(NULL, 300, &pr) != SHOAL_OK)
		memset(&pr, 0, sizeof pr);

	/* warm-up: one token at position 0 touches every weight page */
	shoal_gen_request rq = {.prompt = toks, .n_prompt = 1, .max_tokens = 1};
	if ((err = shoal_gen_run(gen, &rq, NULL, why, sizeof why)))
		goto fail_run;

	shoal_backend_device dev;
	shoal_engine_backend_ops(eng)->devices(shoal_engine_backend(eng), true, &dev, 1);
	uint64_t elems = 0, bpt = bench_bytes_per_token(m, &elems);
	double bound = dev.read_gbps * 1e9 / (double)bpt;

	/* prefill runs: one sampled token after the prompt, prefill time only */
	double pp[SHOAL_BENCH_MAX_RUNS];
	for (int k = 0; k < n_prompts; k++) {
		shoal_gen_stats st;
		rq = (shoal_gen_request){
		    .prompt = toks, .n_prompt = (uint32_t)prompts[k], .max_tokens = 1};
		if ((err = shoal_gen_run(gen, &rq, &st, why, sizeof why)))
			goto fail_run;
		pp[k] = (double)prompts[k] / (1e-9 * (double)st.prefill_ns);
	}
	/* decode runs: after D tokens of context, n_gen steps, each timed */
	uint64_t spec_dr = 0, spec_ac = 0; /* ids drafted and kept over the decode runs */
	double tg[SHOAL_BENCH_MAX_RUNS], tg_cpu[SHOAL_BENCH_MAX_RUNS], med[SHOAL_BENCH_MAX_RUNS],
	    p10[SHOAL_BENCH_MAX_RUNS], p90[SHOAL_BENCH_MAX_RUNS], best[SHOAL_BENCH_MAX_RUNS];
	for (int k = 0; k < n_depths; k++) {
		shoal_bench_times bt = {.gap_ns = gaps, .cap = (size_t)n_gen};
		shoal_gen_stats st;
		rq = (shoal_gen_request){.prompt = toks,
		                         .n_prompt = (uint32_t)(depths[k] + 1),
		                         .max_tokens = (uint32_t)n_gen + 1,
		                         .on_token = bench_on_token,
		                         .ctx = &bt,
		                         .draft_max = (uint32_t)draft_max};
		if ((err = shoal_speculate_drafter(spec, &rq.drafter))) {
			snprintf(why, sizeof why, "no drafter: %s", shoal_strerror(err));
			goto fail_run;
		}
		if ((err = shoal_gen_run(gen, &rq, &st, why, sizeof why)))
			goto fail_run;
		spec_dr += st.drafted;
		spec_ac += st.accepted;
		tg[k] = (double)n_gen / (1e-9 * (double)st.decode_ns);
		/* tokens per second of CPU time per thread: what decoding would
		 * reach with its cores to itself (spinning workers count) */
		tg_cpu[k] = st.decode_cpu_ns ? (double)n_gen * (double)threads /
		                                   (1e-9 * (double)st.decode_cpu_ns)
		                             : 0;
		qsort(bt.gap_ns, bt.n, sizeof *bt.gap_ns, bench_cmp_u64);
		size_t nn = bt.n ? bt.n : 1;
		med[k] = bt.n ? (double)bt.gap_ns[bt.n / 2] / 1e6 : 0;
		p10[k] = bt.n ? (double)bt.gap_ns[(nn - 1) / 10] / 1e6 : 0;
		p90[k] = bt.n ? (double)bt.gap_ns[(nn - 1) * 9 / 10] / 1e6 : 0;
		best[k] = 1.0 / (1e-9 * (double)st.decode_best_ns);
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
#ifdef __APPLE__
	uint64_t peak = (uint64_t)ru.ru_maxrss; /* bytes */
#else
	uint64_t peak = (uint64_t)ru.ru_maxrss * 1024; /* KiB */
#endif
	double gflop_tok = 2.0 * (double)elems / 1e9;
	if (json) {
		printf("{\"model\": \"%s\", \"threads\": %ld, \"device\": \"%s\", "
		       "\"prompt_tokens\": %ld, \"gen_tokens\": %ld, \"prefill_tok_s\": %.3f, "
		       "\"decode_tok_s\": %.3f, \"mem_gbps\": %.3f, \"bytes_per_token\": %llu, "
		       "\"decode_bound_tok_s\": %.3f, \"decode_fraction\": %.4f, "
		       "\"decode_best_tok_s\": %.3f, \"decode_best_fraction\": %.4f, "
		       "\"decode_cpu_tok_s\": %.3f, \"decode_median_ms\": %.3f, "
		       "\"decode_p10_ms\": %.3f, \"decode_p90_ms\": %.3f, "
		       "\"gflop_per_token\": %.3f, \"peak_rss_bytes\": %llu, \"isa\": \"%s\", "
		       "\"prefetch\": \"%s\", \"probe_gbps\": %.3f, \"probe_gbps_other\": %.3f, "
		       "\"prefill\": [",
		       model, threads, dev.name, prompts[0], n_gen, pp[0], tg[0], dev.read_gbps,
		       (unsigned long long)bpt, bound, bound > 0 ? tg[0] / bound : 0, best[0],
		       bound > 0 ? best[0] / bound : 0, tg_cpu[0], med[0], p10[0], p90[0],
		       gflop_tok, (unsigned long long)peak, shoal_kernels_best()->isa,
		       shoal_kernels_prefetch(), pr.gemv_gbps, pr.gemv_gbps_other);
		for (int k = 0; k < n_prompts; k++)
			printf("%s{\"tokens\": %ld, \"tok_s\": %.3f, \"gflop_s\": %.2f}",
			       k ? ", " : "", prompts[k], pp[k], pp[k] * gflop_tok);
		printf("], \"decode\": [");
		for (int k = 0; k < n_depths; k++)
			printf("%s{\"context\": %ld, \"tok_s\": %.3f, \"fraction\": %.4f, "
			       "\"median_ms\": %.3f, \"p10_ms\": %.3f, \"p90_ms\": %.3f, "
			       "\"best_tok_s\": %.3f, \"cpu_tok_s\": %.3f}",
			       k ? ", " : "", depths[k], tg[k], bound > 0 ? tg[k] / bound : 0,
			       med[k], p10[k], p90[k], best[k], tg_cpu[k]);
		printf(
		    "], \"speculate\": \"%s\", \"spec_drafted\": %llu, \"spec_accepted\": %llu}\n",
		    shoal_speculate_name(spec), (unsigned long long)spec_dr,
		    (unsigned long long)spec_ac);
	} else {
		printf("model      %s (%s, %u layers)\n", model, shoal_arch_name(m->hp.arch),
		       m->hp.n_layer);
		printf("device     %s, %.2f GB/s read\n", dev.name, dev.read_gbps);
		printf("kernels    %s, weight prefetch %s (probe: %.2f GB/s mat-vec",
		       shoal_kernels_best()->isa, shoal_kernels_prefetch(), pr.gemv_gbps);
		if (pr.gemv_gbps_other > 0)
			printf("; %.2f GB/s with %s", pr.gemv_gbps_other,
			       strcmp(shoal_kernels_prefetch(), "l2") ? "l2" : "l1");
		printf(")\n");
		for (int k = 0; k < n_prompts; k++)
			printf("prefill    %.2f tok/s, %.1f GFLOP/s (%ld tokens)\n", pp[k],
			       pp[k] * gflop_tok, prompts[k]);
		for (int k = 0; k < n_depths; k++)
			printf("decode     %.2f tok/s at context %ld (%ld tokens; median %.2f ms, "
			       "p10-p90 %.2f-%.2f ms; fastest token %.2f tok/s; %.2f tok/s per "
			       "thread-second of CPU)\n",
			       tg[k], depths[k], n_gen, med[k], p10[k], p90[k], best[k], tg_cpu[k]);
		printf("bytes/tok  %.1f MB\n", (double)bpt / 1e6);
		printf("bound      %.2f tok/s; achieved %.1f%% (fastest token %.1f%%)\n", bound,
		       100 * (bound > 0 ? tg[0] / bound : 0),
		       100 * (bound > 0 ? best[0] / bound : 0));
		printf("peak RSS   %.1f MiB\n", (double)peak / 1048576.0);
		if (spec != SHOAL_SPECULATE_OFF)
			printf("speculate  %s: %llu id(s) drafted, %llu kept (%.0f%%)\n",
			       shoal_speculate_name(spec), (unsigned long long)spec_dr,
			       (unsigned long long)spec_ac,
			       spec_dr ? 100.0 * (double)spec_ac / (double)spec_dr : 0.0);
	}
	status = 0;
	goto out;
fail_run:
	fprintf(stderr, "shoal bench: %s\n", why);
out:
	shoal_gen_free(gen);
	shoal_engine_free(eng);
	shoal_model_free(m);
	free(toks);
	free(gaps);
	return status;
}
