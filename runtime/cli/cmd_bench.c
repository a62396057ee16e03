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

#include "models/model.h"
#include "runtime/backend.h"
#include "runtime/cli/cli.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generate.h"
#include "runtime/cpu/backend_cpu.h"

static void shoal_bench_usage(FILE *f)
{
	fprintf(f, "usage: shoal bench MODEL [--threads T] [--prompt N] [--gen N] [--json]\n"
	           "  --threads T  compute threads (default 1)\n"
	           "  --prompt N   prefill tokens (default 64)\n"
	           "  --gen N      decoded tokens (default 32)\n"
	           "  --json       one JSON object\n");
}

/* Bytes one decode step reads (see the header comment). */
static uint64_t shoal_bench_bytes_per_token(const shoal_model *m)
{
	const shoal_hparams *hp = &m->hp;
	uint64_t sum = 0;
	size_t n = shoal_gguf_n_tensors(m->gguf);
	for (size_t i = 0; i < n; i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(m->gguf, i);
		if (t == m->tok_embd)
			continue;
		if (hp->n_expert && t->ne[2] == hp->n_expert && strstr(t->name, "_exps"))
			sum += t->nbytes / hp->n_expert * hp->n_expert_used;
		else
			sum += t->nbytes;
	}
	if (hp->tied_head)
		sum += m->tok_embd->nbytes;
	else
		sum += m->tok_embd->nbytes / hp->n_vocab;
	return sum;
}

int shoal_cmd_bench(int argc, char **argv)
{
	const char *model = NULL;
	long threads = 1, n_prompt = 64, n_gen = 32;
	bool json = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		long *dst = NULL;
		if (!strcmp(a, "--threads") || !strcmp(a, "-t"))
			dst = &threads;
		else if (!strcmp(a, "--prompt"))
			dst = &n_prompt;
		else if (!strcmp(a, "--gen"))
			dst = &n_gen;
		else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			shoal_bench_usage(stdout);
			return 0;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shoal bench: unknown option %s\n", a);
			shoal_bench_usage(stderr);
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
	if (!model) {
		shoal_bench_usage(stderr);
		return 2;
	}

	char why[256] = "";
	int status = 1;
	shoal_model *m = NULL;
	shoal_engine *eng = NULL;
	shoal_gen *gen = NULL;
	int32_t *toks = NULL; /* (n_prompt) */
	shoal_err err = shoal_model_open(model, &m, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal bench: %s: %s\n", model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = shoal_backend_cpu();
	cfg.n_threads = (uint32_t)threads;
	cfg.n_ctx = (uint32_t)(n_prompt + n_gen + 1);
	cfg.max_rows = (uint32_t)(n_prompt < 512 ? n_prompt : 512);
	err = shoal_engine_new(m, &cfg, &eng, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal bench: %s: %s\n", model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	uint32_t n_vocab = m->hp.n_vocab;
	shoal_gen_config gc = {.sampler = shoal_sampler_defaults()};
	gc.sampler.temp = 0; /* greedy */
	if ((err = shoal_gen_new(eng, &gc, &gen, why, sizeof why)))
		goto fail_run;
	toks = malloc((size_t)n_prompt * sizeof *toks);
	if (!toks) {
		fprintf(stderr, "shoal bench: out of memory\n");
		goto out;
	}

	/* warm-up: one token at position 0 touches every weight page */
	toks[0] = 1 % (int32_t)n_vocab;
	shoal_gen_request rq = {.prompt = toks, .n_prompt = 1, .max_tokens = 1};
	if ((err = shoal_gen_run(gen, &rq, NULL, why, sizeof why)))
		goto fail_run;

	/* prefill: synthetic ids spread over the vocabulary (7919 is prime);
	 * then n_gen decode runs, each fed the greedy token of the last */
	for (long p = 0; p < n_prompt; p++)
		toks[p] = (int32_t)(((uint64_t)p * 7919 + 1) % n_vocab);
	rq.n_prompt = (uint32_t)n_prompt;
	rq.max_tokens = (uint32_t)n_gen + 1;
	shoal_gen_stats st;
	if ((err = shoal_gen_run(gen, &rq, &st, why, sizeof why)))
		goto fail_run;
	/* tokens per second of CPU time per thread: what decoding would reach
	 * with its cores to itself (spinning workers count as busy) */
	double tg_cpu = st.decode_cpu_ns
	                    ? (double)n_gen * (double)threads / (1e-9 * (double)st.decode_cpu_ns)
	                    : 0;

	shoal_backend_device dev;
	shoal_engine_backend_ops(eng)->devices(shoal_engine_backend(eng), true, &dev, 1);
	double pp = (double)n_prompt / (1e-9 * (double)st.prefill_ns);
	double tg = (double)n_gen / (1e-9 * (double)st.decode_ns);
	uint64_t bpt = shoal_bench_bytes_per_token(m);
	double bound = dev.read_gbps * 1e9 / (double)bpt;
	double tg_best = 1.0 / (1e-9 * (double)st.decode_best_ns);
	double frac = bound > 0 ? tg / bound : 0, frac_best = bound > 0 ? tg_best / bound : 0;
	if (json) {
		printf("{\"model\": \"%s\", \"threads\": %ld, \"device\": \"%s\", "
		       "\"prompt_tokens\": %ld, \"gen_tokens\": %ld, \"prefill_tok_s\": %.3f, "
		       "\"decode_tok_s\": %.3f, \"mem_gbps\": %.3f, \"bytes_per_token\": %llu, "
		       "\"decode_bound_tok_s\": %.3f, \"decode_fraction\": %.4f, "
		       "\"decode_best_tok_s\": %.3f, \"decode_best_fraction\": %.4f, "
		       "\"decode_cpu_tok_s\": %.3f}\n",
		       model, threads, dev.name, n_prompt, n_gen, pp, tg, dev.read_gbps,
		       (unsigned long long)bpt, bound, frac, tg_best, frac_best, tg_cpu);
	} else {
		printf("model      %s (%s, %u layers)\n", model, shoal_arch_name(m->hp.arch),
		       m->hp.n_layer);
		printf("device     %s, %.2f GB/s read\n", dev.name, dev.read_gbps);
		printf("prefill    %.2f tok/s (%ld tokens)\n", pp, n_prompt);
		printf("decode     %.2f tok/s (%ld tokens; fastest token %.2f tok/s)\n", tg, n_gen,
		       tg_best);
		printf("decode cpu %.2f tok/s per thread-second of CPU\n", tg_cpu);
		printf("bytes/tok  %.1f MB\n", (double)bpt / 1e6);
		printf("bound      %.2f tok/s; achieved %.1f%% (fastest token %.1f%%)\n", bound,
		       100 * frac, 100 * frac_best);
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
	return status;
}
