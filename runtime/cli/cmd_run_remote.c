/*
 * runtime/cli/cmd_run_remote.c: `shoal run --peer ADDR -p TEXT ...`: send a
 * prompt to a peer of a cluster, which owns the session and runs it
 * through the plan; the tokens stream back as RUN_TOKEN replies over the
 * authenticated control plane (net/ctlmsg.h, runtime/node/serve.h).
 *
 * Part: runtime/ (CLI). The output is the local `shoal run`'s, byte for
 * byte: text, --ids (one line) or --logprobs K (one JSON object per token,
 * the same printf formats over the same float values).
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/endpoint.h"
#include "net/key.h"
#include "net/runmsg.h"
#include "models/prompt.h"
#include "runtime/cli/cli_impl.h"
#include "runtime/engine/draft_kinds.h"
#include "runtime/engine/generate.h"

/* Silence allowed between two replies: the owner waits up to 20 s for a
 * servable plan and fails a session after 30 s without a token; 60 s is
 * above both, so the owner's reason arrives before we give up. */
#define SHOAL_RUN_REMOTE_TIMEOUT_MS 60000
/* A run that ends before its first token because the plan changed (the
 * owner says "retry") is sent again, at most this many times, after a
 * pause of RETRY_MS: a new plan is servable within a few gossip rounds
 * (~1 s at the default 100 ms base period). */
#define SHOAL_RUN_REMOTE_RETRIES  3
#define SHOAL_RUN_REMOTE_RETRY_MS 1000

void cli__run_remote_usage(FILE *f)
{
	fprintf(f,
	        "usage: shoal run --peer HOST[:PORT] [--key FILE | --insecure] -p TEXT [-n N]\n"
	        "                 [--temp T] [--seed S] [--top-k K] [--top-p P] [--min-p P]\n"
	        "                 [--repeat-penalty R] [--chat] [--system TEXT] [--ids]\n"
	        "                 [--logprobs K] [--timeout-ms MS] [--stats] [--speculate MODE]\n"
	        "Sends the prompt to that peer of a cluster (`shoal node --model`), which\n"
	        "runs it through the plan and streams the tokens back. With --chat that\n"
	        "peer formats the prompt with its model's chat template, as local\n"
	        "`shoal run --chat` does. The sampling options are those of a local run.\n"
	        "  --peer HOST[:PORT]     the peer (control port, default 47470)\n"
	        "  --key FILE             the cluster key (default: <state-dir>/cluster.key)\n"
	        "  --insecure             talk to a cluster that runs without a key\n"
	        "  --timeout-ms MS        give up when no token came for MS (default %d)\n"
	        "  --stats                the tokens and the longest pause between two of them\n"
	        "                         (a cluster that re-plans mid-run pauses) on stderr\n"
	        "  --speculate MODE       this run's drafter on the peer: off, auto, lookup,\n"
	        "                         draft (the peer's --draft model), mtp (default: the\n"
	        "                         peer's --speculate); the tokens are the same\n",
	        SHOAL_RUN_REMOTE_TIMEOUT_MS);
}

int cli__run_remote(int argc, char **argv)
{
	const char *peer = NULL, *key_file = NULL, *prompt = NULL, *system = NULL, *spec = NULL;
	bool insecure = false, ids = false, seed_given = false, chat = false, stats = false;
	double n = SHOAL_RUN_DEFAULT_TOKENS, temp = 0.8, seed = 0, top_k = 40, top_p = 0.95,
	       min_p = 0.05, rp = 1.0, lp = 0, tmo = SHOAL_RUN_REMOTE_TIMEOUT_MS, ignored;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		double *num = NULL, lo = 0, hi = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			cli__run_remote_usage(stdout);
			return 0;
		} else if (!strcmp(a, "--insecure")) {
			insecure = true;
			continue;
		} else if (!strcmp(a, "--stats")) {
			stats = true;
			continue;
		} else if (!strcmp(a, "--ids")) {
			ids = true;
			continue;
		} else if (!strcmp(a, "--chat")) {
			chat = true;
			continue;
		}
		if (!val) {
			fprintf(stderr, "shoal run: %s needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--peer"))
			peer = val;
		else if (!strcmp(a, "--key"))
			key_file = val;
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
			prompt = val;
		else if (!strcmp(a, "--system"))
			system = val;
		else if (!strcmp(a, "--speculate")) {
			char sw[SHOAL_WHY_LEN];
			shoal_speculate_kind kind;
			if (shoal_speculate_parse(val, &kind, sw, sizeof sw)) {
				fprintf(stderr, "shoal run: %s\n", sw);
				return 2;
			}
			spec = val; /* the peer says whether it offers that kind */
		} else if (!strcmp(a, "-n"))
			num = &n, lo = 0, hi = SHOAL_RUN_MAX_TOKENS;
		else if (!strcmp(a, "--temp"))
			num = &temp, lo = 0, hi = 1e6;
		else if (!strcmp(a, "--seed"))
			num = &seed, lo = 0, hi = 9.2e18, seed_given = true;
		else if (!strcmp(a, "--top-k"))
			num = &top_k, lo = 0, hi = 1e9;
		else if (!strcmp(a, "--top-p"))
			num = &top_p, lo = 0, hi = 1;
		else if (!strcmp(a, "--min-p"))
			num = &min_p, lo = 0, hi = 1;
		else if (!strcmp(a, "--repeat-penalty"))
			num = &rp, lo = 0, hi = 100;
		else if (!strcmp(a, "--logprobs"))
			num = &lp, lo = 1, hi = SHOAL_GEN_MAX_LOGPROBS;
		else if (!strcmp(a, "--timeout-ms"))
			num = &tmo, lo = 1, hi = 3.6e6;
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t") || !strcmp(a, "--ctx") ||
		         !strcmp(a, "-c"))
			num = &ignored, lo = 0, hi = 1e9; /* the peers' own settings apply */
		else {
			fprintf(stderr, "shoal run: unknown option %s (with --peer)\n", a);
			cli__run_remote_usage(stderr);
			return 2;
		}
		if (num && !cli__num(val, lo, hi, num)) {
			fprintf(stderr, "shoal run: %s needs a number in [%g, %g]\n", a, lo, hi);
			return 2;
		}
		i++;
	}
	if (!peer || !prompt || (key_file && insecure)) {
		cli__run_remote_usage(stderr);
		return 2;
	}
	if (system && strlen(system) > SHOAL_RUN_MAX_SYSTEM) {
		fprintf(stderr, "shoal run: --system is longer than %d bytes\n",
		        SHOAL_RUN_MAX_SYSTEM);
		return 2;
	}
	if (!seed_given)
		seed =
		    (double)(((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0xffffffffffffu);

	char ep[256], why[SHOAL_WHY_WRAP_LEN] = "";
	if (shoal_endpoint_parse(peer, SHOAL_CTL_DEFAULT_PORT, ep, sizeof ep, why, sizeof why) !=
	    SHOAL_OK) {
		fprintf(stderr, "shoal run: %s\n", why);
		return 2;
	}
	shoal_key_curve curve, *keys = NULL;
	char fp[17];
	if (!cli__client_key("run", key_file, insecure, NULL, &curve, &keys, fp))
		return 1;
	int rc = 1;
	shoal_ctl_client *cl = NULL;
	shoal_wire_buf buf;
	shoal_wire_buf_init(&buf);
	uint8_t *reply = NULL;
	size_t reply_len = 0;
	uint64_t seq = 1;
	shoal_run_req req = {.prompt = prompt,
	                     .prompt_len = strlen(prompt),
	                     .max_tokens = (uint32_t)n,
	                     .logprobs = (uint32_t)lp,
	                     .top_k = (uint32_t)top_k,
	                     .temp = (float)temp,
	                     .top_p = (float)top_p,
	                     .min_p = (float)min_p,
	                     .repeat_penalty = (float)rp,
	                     .seed = (uint64_t)seed,
	                     .chat = chat,
	                     .system = system,
	                     .system_len = system ? strlen(system) : 0,
	                     .speculate = spec,
	                     .speculate_len = spec ? strlen(spec) : 0};
	shoal_err e = shoal_ctl_client_new(ep, keys, &cl, why, sizeof why);
	if (!e && (e = shoal_runmsg_encode_req(seq, &req, &buf)))
		snprintf(why, sizeof why, "cannot encode the request: %s", shoal_strerror(e));
	const void *bufs[1] = {buf.data};
	size_t lens[1] = {buf.len};
	if (e || shoal_ctl_client_send(cl, bufs, lens, 1) != SHOAL_OK) {
		fprintf(stderr, "shoal run: %s\n", e ? why : "cannot send the request");
		goto out;
	}
	shoal_runmsg r;
	uint64_t t_last = 0, gap_max = 0;
	long gap_at = -1;
	for (long t = 0, tries = 0;;) {
		free(reply);
		reply = NULL;
		shoal_err re =
		    shoal_ctl_client_recv(cl, (int)tmo, &reply, &reply_len, why, sizeof why);
		if (re) {
			fprintf(stderr, "shoal run: %s: %s\n", ep, why[0] ? why : "no answer");
			if (re == SHOAL_ERR_AUTH)
				cli__key_hint("run", ep, fp);
			goto out;
		}
		if (shoal_runmsg_decode(reply, reply_len, &r, why, sizeof why) != SHOAL_OK ||
		    (r.type != SHOAL_CTLMSG_RUN_TOKEN && r.type != SHOAL_CTLMSG_RUN_END) ||
		    r.seq != seq) {
			fprintf(stderr, "shoal run: bad answer from %s: %s\n", ep,
			        why[0] ? why : "not a reply to this run");
			goto out;
		}
		if (r.type == SHOAL_CTLMSG_RUN_END) {
			const shoal_run_end *d = &r.end;
			if (d->err) {
				/* the owner says whether sending it again may help */
				if (t == 0 && d->retry && tries++ < SHOAL_RUN_REMOTE_RETRIES) {
					fprintf(stderr, "shoal run: %.*s; retrying\n",
					        (int)d->why_len, d->why);
					usleep(SHOAL_RUN_REMOTE_RETRY_MS * 1000);
					if (shoal_runmsg_encode_req(++seq, &req, &buf) != SHOAL_OK)
						goto out;
					bufs[0] = buf.data;
					lens[0] = buf.len;
					if (shoal_ctl_client_send(cl, bufs, lens, 1) != SHOAL_OK)
						goto out;
					continue;
				}
				fflush(stdout);
				fprintf(stderr, "shoal run: %s: %.*s\n", ep, (int)d->why_len,
				        d->why);
				goto out;
			}
			if (d->has_tokens && d->tokens != (uint64_t)t) {
				/* a message was lost on the way (net/runmsg.h, invariant 6) */
				fflush(stdout);
				fprintf(stderr,
				        "\nshoal run: %s: got %ld of the %u tokens the run made: "
				        "a reply was lost on the way\n",
				        ep, t, d->tokens);
				goto out;
			}
			if (!lp && !ids)
				fwrite(d->text, 1, d->text_len, stdout);
			if (!lp)
				printf("\n");
			if (stats)
				fprintf(stderr,
				        "shoal run: %ld tokens; longest pause %.1f ms, before "
				        "token %ld\n",
				        t, (double)gap_max / 1000.0, gap_at);
			rc = 0;
			goto out;
		}
		const shoal_run_token *k = &r.tok;
		uint64_t now = shoal_clock_now_us();
		if (t && now - t_last > gap_max) {
			gap_max = now - t_last;
			gap_at = t;
		}
		t_last = now;
		if (lp) {
			printf("{\"token\": %d, \"logprob\": %.9g, \"top_logprobs\": [", (int)k->id,
			       (double)k->logprob);
			for (uint32_t i = 0; i < k->n_top; i++)
				printf("%s{\"token\": %d, \"logprob\": %.9g}", i ? ", " : "",
				       (int)k->top_ids[i], (double)k->top_lps[i]);
			printf("]}\n");
		} else if (ids) {
			printf("%s%d", t ? " " : "", (int)k->id);
		} else {
			fwrite(k->text, 1, k->text_len, stdout);
		}
		fflush(stdout);
		t++;
	}
out:
	fflush(stdout);
	free(reply);
	shoal_ctl_client_free(cl);
	shoal_wire_buf_fini(&buf);
	shoal_key_wipe(&curve, sizeof curve);
	return rc;
}
