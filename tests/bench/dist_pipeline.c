/*
 * tests/bench/dist_pipeline.c: decode speed of a pipeline of 1, 2 and 3
 * in-process stages (one thread each) over loopback TCP xfer links,
 * against one engine without a network: tokens/s, microseconds per step,
 * the added microseconds per hop, and the messages and bytes per hop per
 * token from the links' counters.
 *
 * Usage: dist_pipeline [MODEL.gguf [N_TOKENS]]   (default: the austen
 * Q8_0 model from $SHOAL_DATA, 64 tokens). Greedy; the prompt is fixed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "tests/helpers/dist_cluster.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static const int32_t PROMPT[] = {1, 450, 338, 263, 8760, 29871, 6967, 9904, 29892, 393, 263, 6114};
#define NP ((uint32_t)(sizeof PROMPT / sizeof PROMPT[0]))

int main(int argc, char **argv)
{
	char path[1024], why[SHOAL_WHY_LEN];
	const char *dir = getenv("SHOAL_DATA");
	if (argc > 1)
		snprintf(path, sizeof path, "%s", argv[1]);
	else
		snprintf(path, sizeof path, "%s/models/austen-dense-q8_0.gguf",
		         dir ? dir : "tests/data");
	uint32_t N = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
	if (N < 2 || N > DC_MAX_TOK) {
		fprintf(stderr, "dist_pipeline: N_TOKENS must be 2..%u\n", DC_MAX_TOK);
		return 2;
	}
	shoal_model *m = NULL;
	if (shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "dist_pipeline: %s: %s\n", path, why);
		return 1;
	}
	shoal_log_set_level(SHOAL_LOG_WARN);
	uint32_t vocab = m->hp.n_vocab;
	int32_t prompt[NP];
	for (uint32_t i = 0; i < NP; i++)
		prompt[i] = PROMPT[i] % (int32_t)vocab;
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = 0.0f;

	/* one engine: (time for N tokens - time for 1) / (N - 1) per step */
	static dc_run_out ref, got;
	dc_reference(m, prompt, NP, N, &sp, &ref); /* warm-up: page in the weights */
	double t0 = now_us();
	dc_reference(m, prompt, NP, 1, &sp, &ref);
	double t1 = now_us();
	dc_reference(m, prompt, NP, N, &sp, &ref);
	double t2 = now_us();
	double alone = ((t2 - t1) - (t1 - t0)) / (N - 1);
	printf("model %s, %u layers, n_embd %u; %u tokens, greedy, 1 thread per stage\n", path,
	       m->hp.n_layer, m->hp.n_embd, N);
	printf("%-10s %10s %10s %12s %14s %16s %6s\n", "stages", "us/step", "tokens/s", "+us/hop",
	       "hidden/hop/tok", "bytes/hop/tok", "exact");
	printf("%-10s %10.1f %10.0f %12s %14s %16s %6s\n", "engine", alone, 1e6 / alone, "-", "-",
	       "-", "-");
	double one = 0;
	int rc = 0;
	for (uint32_t n = 1; n <= 3 && n <= m->hp.n_layer; n++) {
		dc_cluster c;
		uint32_t cuts[2] = {m->hp.n_layer * 1 / n, m->hp.n_layer * 2 / n};
		if (dc_cluster_up(&c, m, cuts, n, 0, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false)) {
			fprintf(stderr, "dist_pipeline: cluster of %u stages failed\n", n);
			rc = 1;
			dc_cluster_down(&c);
			break;
		}
		memset(&got, 0, sizeof got);
		shoal_dist_request rq = {.prompt = prompt,
		                         .n_prompt = NP,
		                         .max_tokens = N,
		                         .logprobs = DC_K_TOP,
		                         .sampler = sp,
		                         .on_token = dc_collect_token,
		                         .ctx = &got};
		shoal_err e = shoal_dist_owner_generate(c.own, &rq, c.owner.links, c.owner.n, 10000,
		                                        why, sizeof why);
		shoal_dist_owner_metrics om;
		shoal_dist_owner_metrics_get(c.own, &om);
		dc_cluster_stop(&c);
		double frames = 0, bytes = 0;
		if (n > 1) {
			shoal_xfer_metrics mt;
			shoal_xfer_link_metrics(dc_lookup(&c.st[0], c.st[1].id), &mt);
			/* decode only: the prefill frame is the first, as big as NP rows */
			frames = (double)(mt.frames_sent[SHOAL_XFER_KIND_HIDDEN] - 1) / (N - 1);
			bytes = (double)(mt.bytes_sent[SHOAL_XFER_KIND_HIDDEN] -
			                 (SHOAL_XFER_HDR_SIZE + NP * (16.0 + 4.0 * m->hp.n_embd))) /
			        (N - 1);
		}
		dc_cluster_down(&c);
		if (e) {
			fprintf(stderr, "dist_pipeline: %u stages: %s\n", n, why);
			rc = 1;
			break;
		}
		double us = om.steps ? (double)om.step_ns / 1e3 / (double)om.steps : 0;
		if (n == 1)
			one = us;
		char hop[32] = "-";
		if (n > 1)
			snprintf(hop, sizeof hop, "%.1f", (us - one) / (n - 1));
		printf("%-10u %10.1f %10.0f %12s %14.2f %16.0f %6s\n", n, us, 1e6 / us, hop, frames,
		       bytes, dc_same_run(&ref, &got) ? "yes" : "NO");
	}
	shoal_model_free(m);
	return rc;
}
