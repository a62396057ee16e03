/*
 * runtime/cli/cmd_perplexity.c: `shoal perplexity MODEL FILE`: how well a model
 * predicts a text, by the usual protocol of the reference engine.
 *
 * Part: runtime/ (CLI). The file is tokenized whole (BOS first when the
 * model adds BOS) and cut into consecutive windows of C tokens; token 0 of
 * each window becomes BOS (when the model uses one); each window is a fresh
 * session evaluated by batched prefill; the logits at positions
 * C/2 .. C-2 are scored against the next token (C - 1 - C/2 per window)
 * and perplexity = exp(mean negative log-likelihood).
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/model.h"
#include "models/tokenizer.h"
#include "runtime/backends.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generate.h"

static void ppl_usage(FILE *f)
{
	fprintf(f, "usage: shoal perplexity MODEL FILE [--ctx C] [--chunks N] [--threads T] "
	           "[--kv-type f16|f32] [--backend B] [--json]\n"
	           "  --ctx C      window length (default: the model's training context)\n"
	           "  --chunks N   only the first N windows\n"
	           "  --threads T  compute threads (default 1)\n");
	cli__backend_usage(f, 15);
	fprintf(f, "  --kv-type T  KV cache elements, f16 (default) or f32\n"
	           "  --json       print {\"perplexity\", \"tokens\" (scored), \"windows\", "
	           "\"ctx\", \"seconds\"}\n");
}

static bool ppl_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*out = v;
	return true;
}

static char *ppl_read(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n == cap) {
			char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		if (!got)
			break;
		n += got;
	}
	if (buf && ferror(f)) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = n;
	return buf;
}

typedef struct shoal_ppl_score {
	const int32_t *win; /* the window being scored */
	uint32_t n_vocab;
	double nll;
	size_t scored;
} shoal_ppl_score;

/* -log softmax(logits)[target], in double. */
static double ppl_nll(const float *logits, uint32_t n_vocab, int32_t target)
{
	float mx = logits[0];
	for (uint32_t i = 1; i < n_vocab; i++)
		if (logits[i] > mx)
			mx = logits[i];
	double sum = 0;
	for (uint32_t i = 0; i < n_vocab; i++)
		sum += exp((double)logits[i] - mx);
	return -((double)logits[target] - mx - log(sum));
}

/* The generation loop's prefill hands each scored position's logits. */
static void ppl_on_logits(void *ctx, uint32_t pos, const float *logits)
{
	shoal_ppl_score *sc = ctx;
	sc->nll += ppl_nll(logits, sc->n_vocab, sc->win[pos + 1]);
	sc->scored++;
}

int shoal_cmd_perplexity(int argc, char **argv)
{
	const char *model = NULL, *file = NULL;
	long ctx = 0, chunks = 0, threads = 1;
	bool json = false;
	shoal_dtype kv_type = SHOAL_DTYPE_F16;
	const char *backend_name = NULL; /* "auto" */
	const shoal_backend_ops *backend = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		long *dst = NULL, lo = 1, hi = 1 << 24;
		if (!strcmp(a, "--ctx") || !strcmp(a, "-c"))
			dst = &ctx, lo = 4;
		else if (!strcmp(a, "--chunks"))
			dst = &chunks;
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t"))
			dst = &threads, hi = 1024;
		else if (!strcmp(a, "--kv-type")) {
			if (i + 1 >= argc || !cli__kv_type(argv[++i], &kv_type)) {
				fprintf(stderr, "shoal perplexity: --kv-type takes f16 or f32\n");
				return 2;
			}
		} else if (!strcmp(a, "--backend")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "shoal perplexity: --backend needs a name\n");
				return 2;
			}
			backend_name = argv[++i];
		} else if (!strcmp(a, "--json"))
			json = true;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			ppl_usage(stdout);
			return 0;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shoal perplexity: unknown option %s\n", a);
			ppl_usage(stderr);
			return 2;
		} else if (!model)
			model = a;
		else if (!file)
			file = a;
		else {
			fprintf(stderr, "shoal perplexity: unexpected argument %s\n", a);
			return 2;
		}
		if (dst && (i + 1 >= argc || !ppl_long(argv[++i], lo, hi, dst))) {
			fprintf(stderr, "shoal perplexity: %s needs a number in [%ld, %ld]\n", a,
			        lo, hi);
			return 2;
		}
	}
	if (!model || !file) {
		ppl_usage(stderr);
		return 2;
	}
	if (!cli__backend("shoal perplexity", backend_name, &backend))
		return 2;

	char why[SHOAL_WHY_LEN] = "";
	int status = 1;
	shoal_model *m = NULL;
	shoal_tokenizer *tok = NULL;
	shoal_engine *eng = NULL;
	char *text = NULL;
	int32_t *ids = NULL;
	shoal_gen *gen = NULL;
	size_t n_ids = 0, text_len = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);

	shoal_err err = shoal_model_open(model, &m, why, sizeof why);
	if (!err)
		err = shoal_tokenizer_from_gguf(m->gguf, &tok, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal perplexity: %s: %s\n", model,
		        why[0] ? why : shoal_strerror(err));
		goto out;
	}
	text = ppl_read(file, &text_len);
	if (!text) {
		fprintf(stderr, "shoal perplexity: %s: %s\n", file, strerror(errno));
		goto out;
	}
	err = shoal_tokenizer_encode(tok, text, text_len, true, false, &ids, &n_ids);
	if (err) {
		fprintf(stderr, "shoal perplexity: %s: cannot tokenize: %s\n", file,
		        shoal_strerror(err));
		goto out;
	}
	uint32_t C = ctx ? (uint32_t)ctx : m->hp.n_ctx_train;
	size_t W = n_ids / C;
	if (chunks && (size_t)chunks < W)
		W = (size_t)chunks;
	if (W == 0) {
		fprintf(stderr, "shoal perplexity: %s: %zu tokens, fewer than one window of %u\n",
		        file, n_ids, C);
		goto out;
	}
	shoal_engine_config cfg = shoal_engine_config_default(m);
	cfg.backend = backend;
	cfg.n_threads = (uint32_t)threads;
	cfg.n_ctx = C;
	cfg.kv_type = kv_type;
	/* rows per run: up to 512 (a prefill chunk as in the reference), fewer
	 * when the logits of that many rows would pass 256 MiB (a 152k-word
	 * vocabulary: 441 rows) */
	uint32_t rows_cap = (uint32_t)((256u << 20) / (4 * (uint64_t)m->hp.n_vocab));
	cfg.max_rows = C < 512 ? C : 512;
	if (cfg.max_rows > rows_cap)
		cfg.max_rows = rows_cap ? rows_cap : 1;
	err = shoal_engine_new(m, &cfg, &eng, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal perplexity: %s: %s\n", model,
		        why[0] ? why : shoal_strerror(err));
		goto out;
	}
	shoal_gen_config gc = {.sampler = shoal_sampler_defaults(), .prompt_logits = true};
	gc.sampler.temp = 0; /* nothing is sampled: max_tokens 0 */
	err = shoal_gen_new(eng, &gc, &gen, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal perplexity: %s\n", why);
		goto out;
	}
	int32_t bos = shoal_tokenizer_bos(tok);
	bool use_bos = shoal_tokenizer_adds_bos(tok) && bos >= 0;
	shoal_ppl_score sc = {.n_vocab = m->hp.n_vocab};
	for (size_t w = 0; w < W; w++) {
		int32_t *win = ids + w * C; /* (C) */
		int32_t tok0 = win[0];
		if (use_bos)
			win[0] = bos;
		/* the window as a prompt that samples nothing: the logits of
		 * positions C/2 .. C-2 are scored against the next token */
		sc.win = win;
		shoal_gen_request rq = {.prompt = win,
		                        .n_prompt = C,
		                        .max_tokens = 0,
		                        .ctx = &sc,
		                        .score_from = C / 2,
		                        .score_to = C - 1,
		                        .on_logits = ppl_on_logits};
		err = shoal_gen_run(gen, &rq, NULL, why, sizeof why);
		win[0] = tok0;
		if (err) {
			fprintf(stderr, "shoal perplexity: %s\n", why);
			goto out;
		}
		if (!json)
			fprintf(stderr, "[%zu] %.4f\n", w + 1, exp(sc.nll / (double)sc.scored));
	}
	double nll = sc.nll;
	size_t scored = sc.scored;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	double ppl = exp(nll / (double)scored);
	if (json)
		printf("{\"perplexity\": %.6f, \"tokens\": %zu, \"windows\": %zu, \"ctx\": %u, "
		       "\"seconds\": %.3f}\n",
		       ppl, scored, W, C, secs);
	else
		printf("perplexity: %.4f (%zu windows of %u tokens, %zu scored, %.2f s)\n", ppl, W,
		       C, scored, secs);
	status = 0;
out:
	shoal_gen_free(gen);
	shoal_engine_free(eng);
	shoal_tokenizer_free(tok);
	shoal_model_free(m);
	free(text);
	free(ids);
	return status;
}
