/*
 * runtime/cli/cmd_run.c: `shoal run MODEL -p TEXT ...`: one prompt on this
 * machine, the generated text streamed to stdout as it is produced.
 *
 * Part: runtime/ (CLI). The whole model on one engine (all layers, the
 * embedding and the head), run by the generation loop of
 * runtime/engine/generate.h: the one-stage case of the path a cluster's
 * session owner drives. Output modes: text (streaming detokenizer),
 * --ids (the generated ids on one line), --logprobs K (one JSON object per
 * generated token). With --peer ADDR the prompt goes to a cluster peer
 * instead (runtime/cli/cmd_run_remote.c).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/chat.h"
#include "models/model.h"
#include "models/prompt.h"
#include "models/tokenizer.h"
#include "runtime/backends.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/engine/draft_kinds.h"
#include "runtime/engine/draft_model.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/mtp.h"

static void run_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal run MODEL -p TEXT [options]\n"
	        "  -p, --prompt TEXT      the prompt\n"
	        "  -n N                   tokens to generate (default %d)\n"
	        "  --temp T               temperature; 0 is greedy (default 0.8)\n"
	        "  --seed S               sampler seed (default: from the clock)\n"
	        "  --top-k K              (default 40; 0 off)\n"
	        "  --top-p P              (default 0.95; 1 off)\n"
	        "  --min-p P              (default 0.05; 0 off)\n"
	        "  --repeat-penalty R     (default 1.0: off)\n"
	        "  --threads T            compute threads (default 1)\n",
	        SHOAL_RUN_DEFAULT_TOKENS);
	cli__backend_usage(f, 25);
	fprintf(f,
	        "  --ctx C                context length (default: the model's, at most "
	        "4096)\n" CLI__KV_TYPE_HELP
	        "  --chat                 format the prompt as a user message with the\n"
	        "                         model's chat template\n"
	        "  --system TEXT          system message for --chat\n"
	        "  --ids                  print the generated token ids, one line\n"
	        "  --speculate MODE       exact speculative decoding: auto (prompt lookup),\n"
	        "                         off (default), lookup, draft (needs --draft), mtp\n"
	        "                         (deepseek2's MTP layer); the tokens are the same,\n"
	        "                         the counts of drafted and kept ids go to stderr\n"
	        "  --draft-max K          ids drafted per step at most, 1..16 (default 8)\n"
	        "  --draft FILE           the draft model of --speculate draft (implies it): a\n"
	        "                         small model with the same vocabulary, e.g. a\n"
	        "                         lower-bit copy (tests/helpers/requant); local runs only\n"
	        "  --logprobs K           print one JSON object per generated token with\n"
	        "                         its logprob and the K best alternatives (9\n"
	        "                         significant digits: the float exactly)\n"
	        "With --peer the model runs on a cluster instead:\n\n");
	cli__run_remote_usage(f);
}

typedef struct shoal_run_opts {
	const char *model, *prompt, *system;
	long n;
	shoal_sampler_params sp;
	bool seed_given;
	long threads, ctx, logprobs;
	shoal_dtype kv_type;
	const shoal_backend_ops *backend;
	bool chat, ids;
	shoal_speculate_kind spec;
	bool spec_given;
	uint32_t draft_max;
	const char *draft; /* --draft FILE: the draft model of --speculate draft */
} shoal_run_opts;

/* 0 ok, 2 usage error (message printed). */
static int run_parse(int argc, char **argv, shoal_run_opts *o)
{
	memset(o, 0, sizeof *o);
	o->n = SHOAL_RUN_DEFAULT_TOKENS;
	o->sp = shoal_sampler_defaults();
	o->threads = 1;
	o->kv_type = SHOAL_DTYPE_F16;
	const char *backend = NULL; /* "auto" */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		double v;
		bool has_val = i + 1 < argc;
		const char *val = has_val ? argv[i + 1] : NULL;
#define NUM(lo, hi)                                                                                \
	do {                                                                                       \
		if (!has_val || !cli__num(val, lo, hi, &v)) {                                      \
			fprintf(stderr, "shoal run: %s needs a number in [%g, %g]\n", a,           \
			        (double)(lo), (double)(hi));                                       \
			return 2;                                                                  \
		}                                                                                  \
		i++;                                                                               \
	} while (0)
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			run_usage(stdout);
			return 1;
		} else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
			if (!has_val)
				goto missing;
			o->prompt = argv[++i];
		} else if (!strcmp(a, "--system")) {
			if (!has_val)
				goto missing;
			o->system = argv[++i];
		} else if (!strcmp(a, "-n")) {
			NUM(0, SHOAL_RUN_MAX_TOKENS);
			o->n = (long)v;
		} else if (!strcmp(a, "--temp")) {
			NUM(0, 1e6);
			o->sp.temp = (float)v;
		} else if (!strcmp(a, "--seed")) {
			NUM(0, 1.8e19);
			o->sp.seed = (uint64_t)v;
			o->seed_given = true;
		} else if (!strcmp(a, "--top-k")) {
			NUM(0, 1e9);
			o->sp.top_k = (int32_t)v;
		} else if (!strcmp(a, "--top-p")) {
			NUM(0, 1);
			o->sp.top_p = (float)v;
		} else if (!strcmp(a, "--min-p")) {
			NUM(0, 1);
			o->sp.min_p = (float)v;
		} else if (!strcmp(a, "--repeat-penalty")) {
			NUM(0, 100);
			o->sp.repeat_penalty = (float)v;
		} else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
			NUM(1, 1024);
			o->threads = (long)v;
		} else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
			NUM(1, 1 << 24);
			o->ctx = (long)v;
		} else if (!strcmp(a, "--kv-type")) {
			if (!has_val)
				goto missing;
			if (!cli__kv_type(argv[++i], &o->kv_type)) {
				fprintf(stderr, "shoal run: --kv-type takes f16 or f32, not '%s'\n",
				        argv[i]);
				return 2;
			}
		} else if (!strcmp(a, "--backend")) {
			if (!has_val)
				goto missing;
			backend = argv[++i];
		} else if (!strcmp(a, "--logprobs")) {
			NUM(1, SHOAL_GEN_MAX_LOGPROBS);
			o->logprobs = (long)v;
		} else if (!strcmp(a, "--speculate")) {
			char sw[SHOAL_WHY_LEN];
			if (!has_val)
				goto missing;
			/* a draft model runs here (--draft); not yet on a cluster;
			 * mtp needs a model with an MTP layer (checked at open) */
			if (shoal_speculate_parse(argv[++i], &o->spec, sw, sizeof sw) ||
			    (o->spec != SHOAL_SPECULATE_DRAFT && o->spec != SHOAL_SPECULATE_MTP &&
			     shoal_speculate_check(o->spec, sw, sizeof sw))) {
				fprintf(stderr, "shoal run: %s\n", sw);
				return 2;
			}
			o->spec_given = true;
		} else if (!strcmp(a, "--draft")) {
			if (!has_val)
				goto missing;
			o->draft = argv[++i];
		} else if (!strcmp(a, "--draft-max")) {
			NUM(1, SHOAL_SPECULATE_DRAFT_MAX_MAX);
			o->draft_max = (uint32_t)v;
		} else if (!strcmp(a, "--chat")) {
			o->chat = true;
		} else if (!strcmp(a, "--ids")) {
			o->ids = true;
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "shoal run: unknown option %s\n", a);
			run_usage(stderr);
			return 2;
		} else if (!o->model) {
			o->model = a;
		} else {
			fprintf(stderr, "shoal run: unexpected argument %s\n", a);
			return 2;
		}
		continue;
	missing:
		fprintf(stderr, "shoal run: %s needs a value\n", a);
		return 2;
#undef NUM
	}
	if (!o->model || !o->prompt) {
		run_usage(stderr);
		return 2;
	}
	if (!cli__backend("shoal run", backend, &o->backend))
		return 2;
	/* --draft alone means --speculate draft; with another mode it is a mistake */
	if (o->draft && !o->spec_given)
		o->spec = SHOAL_SPECULATE_DRAFT;
	if (o->draft && o->spec != SHOAL_SPECULATE_DRAFT) {
		fprintf(stderr,
		        "shoal run: --draft FILE is the draft model of --speculate draft, "
		        "not of --speculate %s\n",
		        shoal_speculate_name(o->spec));
		return 2;
	}
	if (o->spec == SHOAL_SPECULATE_DRAFT && !o->draft) {
		fprintf(stderr, "shoal run: --speculate draft needs --draft FILE (a small model "
		                "with the same vocabulary, e.g. a lower-bit copy)\n");
		return 2;
	}
	if (!o->seed_given)
		o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	return 0;
}

/* Where the tokens go: one JSON line each, the ids on one line, or text. */
typedef struct shoal_run_out {
	const shoal_run_opts *o;
	shoal_detok dt;
	char text[512];
} shoal_run_out;

static int run_on_token(void *ctx, const shoal_gen_token *t)
{
	shoal_run_out *ro = ctx;
	if (ro->o->logprobs) {
		printf("{\"token\": %d, \"logprob\": %.9g, \"top_logprobs\": [", t->id, t->logprob);
		for (uint32_t i = 0; i < t->n_top; i++)
			printf("%s{\"token\": %d, \"logprob\": %.9g}", i ? ", " : "", t->top_ids[i],
			       t->top_lps[i]);
		printf("]}\n");
	} else if (ro->o->ids) {
		printf("%s%d", t->step ? " " : "", t->id);
	} else {
		size_t len = shoal_detok_push(&ro->dt, t->id, ro->text, sizeof ro->text);
		fwrite(ro->text, 1, len, stdout);
	}
	fflush(stdout);
	return 0;
}

int shoal_cmd_run(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--peer"))
			return cli__run_remote(argc, argv);
	shoal_run_opts o;
	int rc = run_parse(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : rc;

	char why[SHOAL_WHY_LEN] = "";
	int status = 1;
	shoal_model *m = NULL;
	shoal_tokenizer *tok = NULL;
	shoal_engine *eng = NULL;
	shoal_gen *gen = NULL;
	shoal_draft_model *dm = NULL; /* --speculate draft; its drafter the run frees */
	shoal_mtp *mtp = NULL;        /* --speculate mtp; its drafter the run frees */
	int32_t *ids = NULL;
	size_t n_ids = 0;

	shoal_err err = shoal_model_open(o.model, &m, why, sizeof why);
	if (!err)
		err = shoal_tokenizer_from_gguf(m->gguf, &tok, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal run: %s: %s\n", o.model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	if (o.chat) {
		const char *tmpl = NULL;
		size_t tlen = 0;
		shoal_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl, &tlen);
		if (!tmpl || !tlen)
			fprintf(stderr,
			        "shoal run: %s has no chat template: --chat formats the "
			        "messages as plain \"role: text\" lines\n",
			        o.model);
	}
	if (o.ctx && m->hp.n_ctx_train && (uint32_t)o.ctx > m->hp.n_ctx_train)
		fprintf(stderr,
		        "shoal run: --ctx %ld is above the %u tokens the model was trained "
		        "for: text past that point is likely poor\n",
		        o.ctx, m->hp.n_ctx_train);
	err = shoal_prompt_ids(m, tok, o.prompt, o.chat, o.system, &ids, &n_ids, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal run: %s: %s\n", o.model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	if (n_ids == 0) {
		fprintf(stderr, "shoal run: the prompt has no tokens\n");
		goto out;
	}

	shoal_engine_config cfg = shoal_engine_config_default(m);

	cfg.backend = o.backend;
	cfg.n_threads = (uint32_t)o.threads;
	cfg.kv_type = o.kv_type;
	if (o.ctx)
		cfg.n_ctx = (uint32_t)o.ctx;
	if (cfg.max_rows > cfg.n_ctx)
		cfg.max_rows = cfg.n_ctx;
	err = shoal_engine_new(m, &cfg, &eng, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal run: %s: %s\n", o.model, why[0] ? why : shoal_strerror(err));
		goto out;
	}
	uint32_t n_ctx = shoal_engine_n_ctx(eng);
	if (n_ids >= n_ctx) {
		fprintf(stderr, "shoal run: the prompt has %zu tokens, the context %u\n", n_ids,
		        n_ctx);
		goto out;
	}
	shoal_gen_config gc = {.sampler = o.sp,
	                       .logprob = o.logprobs > 0,
	                       .n_top = (uint32_t)o.logprobs,
	                       .speculate = o.spec != SHOAL_SPECULATE_OFF};
	if ((err = shoal_gen_new(eng, &gc, &gen, why, sizeof why))) {
		fprintf(stderr, "shoal run: %s\n", why);
		goto out;
	}
	shoal_run_out ro = {.o = &o};
	shoal_detok_init(&ro.dt, tok, false);
	/* only the continuation is printed: its first word keeps its space */
	ro.dt.first = false;
	shoal_gen_request rq = {.prompt = ids,
	                        .n_prompt = (uint32_t)n_ids,
	                        .max_tokens = (uint32_t)o.n,
	                        .eog = tok,
	                        .on_token = run_on_token,
	                        .ctx = &ro,
	                        .draft_max = o.draft_max};
	if (o.spec == SHOAL_SPECULATE_DRAFT) {
		/* the draft model on the target's backend and context, one stream */
		shoal_engine_config dcfg = cfg;
		dcfg.n_ctx = n_ctx;
		dcfg.max_sessions = 1;
		if ((err = shoal_draft_model_open(o.draft, m, &dcfg, &dm, why, sizeof why)) ||
		    (err = shoal_draft_model_drafter(dm, &rq.drafter, why, sizeof why))) {
			fprintf(stderr, "shoal run: --draft: %s\n",
			        why[0] ? why : shoal_strerror(err));
			goto out;
		}
	} else if (o.spec == SHOAL_SPECULATE_MTP) {
		/* the MTP layer beside the engine, fed its kept rows (generate.c) */
		shoal_engine_config mcfg = cfg;
		mcfg.n_ctx = n_ctx;
		mcfg.max_sessions = 1;
		if ((err = shoal_mtp_new(m, &mcfg, &mtp, why, sizeof why)) ||
		    (err = shoal_mtp_drafter_new(mtp, &rq.drafter, why, sizeof why))) {
			fprintf(stderr, "shoal run: --speculate mtp: %s\n",
			        why[0] ? why : shoal_strerror(err));
			goto out;
		}
	} else if ((err = shoal_speculate_drafter(o.spec, &rq.drafter))) {
		fprintf(stderr, "shoal run: no drafter: %s\n", shoal_strerror(err));
		goto out;
	}
	shoal_gen_stats gst;
	if ((err = shoal_gen_run(gen, &rq, &gst, why, sizeof why))) {
		fprintf(stderr, "shoal run: %s\n", why);
		goto out;
	}
	if (!o.logprobs && !o.ids) {
		size_t len = shoal_detok_flush(&ro.dt, ro.text, sizeof ro.text);
		fwrite(ro.text, 1, len, stdout);
	}
	if (!o.logprobs)
		printf("\n");
	fflush(stdout);
	if (o.spec != SHOAL_SPECULATE_OFF)
		fprintf(stderr,
		        "shoal run: speculation (%s): %u id(s) drafted, %u kept (%.0f%%); %u "
		        "token(s) in %u step(s)\n",
		        shoal_speculate_name(o.spec), gst.drafted, gst.accepted,
		        gst.drafted ? 100.0 * gst.accepted / gst.drafted : 0.0, gst.tokens,
		        gst.decode_runs);
	if (gst.stop == SHOAL_GEN_STOP_CTX)
		fprintf(stderr,
		        "shoal run: stopped after %u tokens: the context (%u tokens) is full; "
		        "--ctx sets it\n",
		        gst.tokens, n_ctx);
	status = 0;
out:
	fflush(stdout);
	shoal_gen_free(gen);
	shoal_draft_model_free(dm);
	shoal_mtp_free(mtp);
	shoal_engine_free(eng);
	shoal_tokenizer_free(tok);
	shoal_model_free(m);
	free(ids);
	return status;
}
