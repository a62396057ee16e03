/*
 * runtime/node/serve.c: the node's serving state (serve.h): open the model,
 * its id, manifest and tokenizer; start and stop the data plane; the kept
 * plan of the state directory; our record's serving part.
 *
 * Part: runtime/node. The other jobs of the serving state have files of
 * their own: serve_plan.c (planning from the view), serve_ready.c
 * (servability), serve_part.c (this peer's part), serve_runs.c and
 * serve_clients.c (runs and their clients), serve_status.c, and the data
 * plane's threads in serve_data.c and serve_links.c.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"
#include "base/statedir.h"

/* First-start hashing of a large file: a bar on stderr when it is a
 * terminal, a log line per quarter otherwise (models/ prints nothing). */
static void serve_hash_progress(void *ud, uint64_t done, uint64_t total)
{
	shoal_serve *cl = ud;
	static const uint64_t big = 256ull << 20; /* smaller files hash in < 0.3 s */
	if (total < big)
		return;
	int q = (int)(4 * done / total);
	if (isatty(2)) {
		fprintf(stderr, "\rhashing the model: %.0f of %.0f MiB%s", (double)done / 1048576.0,
		        (double)total / 1048576.0, done == total ? "\n" : "");
		fflush(stderr);
	} else if (q > cl->hash_logged) {
		cl->hash_logged = q;
		SHOAL_LOG_I("cluster", "hashing the model: %d%% of %.0f MiB", 25 * q,
		            (double)total / 1048576.0);
	}
}

/* The last plan that became servable is kept in the state directory
 * (plan-<model id, 16 hex>: its canonical encoding, scheduler/plan.h) and
 * is the previous plan of the next start: a restarted peer then plans from
 * the plan its peers still serve, also one they derived from an older plan
 * (which it could not recompute), and a restart changes no plan. */
static void serve_plan_path(const shoal_serve *cl, char *out, size_t cap)
{
	char hex[65];
	shoal_model_id_hex(cl->model_id, hex);
	snprintf(out, cap, "%s/plan-%.16s", cl->state_dir, hex);
}

void serve__plan_save(shoal_serve *cl)
{
	uint8_t *enc = NULL;
	size_t len = 0;
	char path[1100], why[SHOAL_WHY_WRAP_LEN];
	if (!cl->state_dir[0] || !cl->prev || shoal_plan_encode(cl->prev, &enc, &len) != SHOAL_OK)
		return;
	serve_plan_path(cl, path, sizeof path);
	if (shoal_file_replace(path, enc, len, false, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("cluster", "cannot keep the plan: %s", why);
	free(enc);
}

static void serve_plan_load(shoal_serve *cl)
{
	char path[1100], why[SHOAL_WHY_LEN], dh[65];
	if (!cl->state_dir[0])
		return;
	serve_plan_path(cl, path, sizeof path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	uint8_t buf[1 << 16];
	size_t len = fread(buf, 1, sizeof buf, f);
	bool whole = feof(f) && !ferror(f);
	fclose(f);
	shoal_plan *p = NULL;
	if (!whole || shoal_plan_decode(buf, len, &p, why, sizeof why) != SHOAL_OK ||
	    memcmp(shoal_plan_model_id(p), cl->model_id, SHOAL_MODEL_ID_BYTES)) {
		SHOAL_LOG_W("cluster", "ignoring the kept plan %s: %s", path,
		            !whole ? "too long"
		            : p    ? "another model's"
		                   : why);
		shoal_plan_free(p);
		return;
	}
	shoal_digest_hex(shoal_plan_digest(p), dh);
	SHOAL_LOG_I("cluster", "previous plan %.16s (epoch %llu) from the state directory", dh,
	            (unsigned long long)shoal_plan_epoch(p));
	cl->prev = p;
	cl->served_epoch = shoal_plan_epoch(p);
}

shoal_err shoal_serve_new(const shoal_serve_config *cfg, shoal_serve **out, char *why,
                          size_t why_len)
{
	shoal_err e;
	*out = NULL;
	shoal_serve *cl = calloc(1, sizeof *cl);
	if (!cl)
		return SHOAL_ERR_NOMEM;
	cl->cfg = *cfg;
	if (cfg->data_host) {
		snprintf(cl->data_host, sizeof cl->data_host, "%s", cfg->data_host);
		cl->cfg.data_host = cl->data_host;
	}
	cl->wc = cfg->wcache; /* ours from here, also on failure */
	cl->cfg.wcache = NULL;
	cl->wake[0] = cl->wake[1] = cl->evfd[0] = cl->evfd[1] = -1;
	cl->xwake[0] = cl->xwake[1] = -1;
	snprintf(cl->model_path, sizeof cl->model_path, "%s",
	         cl->wc ? shoal_wcache_path(cl->wc) : cfg->model_path);
	snprintf(cl->state_dir, sizeof cl->state_dir, "%s", cfg->state_dir ? cfg->state_dir : "");
	cl->cfg.model_path = cl->model_path;
	cl->cfg.state_dir = cl->state_dir;
	if (cfg->key)
		cl->key = *cfg->key;
	cl->cfg.key = NULL;
	cl->lctx_stage = (shoal_serve_lctx){cl, SHOAL_SERVE_ROLE_STAGE};
	cl->lctx_owner = (shoal_serve_lctx){cl, SHOAL_SERVE_ROLE_OWNER};
	cl->lctx_experts = (shoal_serve_lctx){cl, SHOAL_SERVE_ROLE_EXPERTS};
	cl->lctx_tensor = (shoal_serve_lctx){cl, SHOAL_SERVE_ROLE_TENSOR};
	snprintf(cl->plan_why, sizeof cl->plan_why, "no view yet");
	if ((e = shoal_model_open(cl->model_path, &cl->model, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_tokenizer_from_gguf(cl->model->gguf, &cl->tok, why, why_len)) != SHOAL_OK)
		goto fail;
	if (!cl->wc && (e = shoal_model_id_load_cb(
	                    cl->model->gguf, cl->state_dir[0] ? cl->state_dir : NULL,
	                    serve_hash_progress, cl, &cl->mid, why, why_len)) != SHOAL_OK)
		goto fail;
	const shoal_model_id *mid = cl->wc ? shoal_wcache_id(cl->wc) : cl->mid;
	memcpy(cl->model_id, shoal_model_id_digest(mid), SHOAL_MODEL_ID_BYTES);
	if ((e = shoal_weights_server_new(cl->model->gguf, mid, cl->wc, &cl->wserve, why,
	                                  why_len)) != SHOAL_OK)
		goto fail;
	if (cl->wc) {
		char wdir[1100];
		snprintf(wdir, sizeof wdir, "%s/" SHOAL_WEIGHTS_DIR, cl->state_dir);
		shoal_weights_config wcf = {.key = cfg->key ? *cfg->key : (shoal_key){{0}},
		                            .dir = wdir,
		                            .cache_max = cfg->cache_max,
		                            .tty = isatty(2) != 0};
		memcpy(wcf.self, cfg->self, SHOAL_PEER_ID_LEN);
		memcpy(wcf.model_id, cl->model_id, SHOAL_MODEL_ID_BYTES);
		e = shoal_weights_fetcher_new(&wcf, &cl->wf);
		sodium_memzero(&wcf.key, sizeof wcf.key);
		if (e != SHOAL_OK)
			goto fail;
	}
	struct stat st;
	if (stat(cl->model_path, &st) == 0)
		cl->file_bytes = (uint64_t)st.st_size;
	if ((e = shoal_model_manifest(cl->model, &cl->mf)) != SHOAL_OK) {
		shoal_why(why, why_len, e, "cannot build the manifest of %s", cl->model_path);
		goto fail;
	}
	memcpy(cl->mf.model_id, cl->model_id, SHOAL_MODEL_ID_BYTES);
	serve_plan_load(cl);
	shoal_policy_init(&cl->pol);
	cl->tm_stage = -1; /* no plan yet (serve_timing.c) */
	/* As local `shoal run`: the model's context, at most 4096 unless asked
	 * (a 128k-token KV reservation would make most clusters infeasible). */
	cl->pol.ctx = cfg->ctx ? cfg->ctx : cl->model->hp.n_ctx_train;
	if (!cl->pol.ctx || (!cfg->ctx && cl->pol.ctx > SHOAL_SERVE_DEFAULT_CTX))
		cl->pol.ctx = SHOAL_SERVE_DEFAULT_CTX;
	cl->pol.sessions = cfg->sessions ? cfg->sessions : SHOAL_SERVE_SESSIONS; /* 0: per plan */
	if (cl->pol.sessions > SHOAL_SERVE_MAX_SESSIONS) {
		e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "at most %u sessions per stage",
		              SHOAL_SERVE_MAX_SESSIONS);
		goto fail;
	}
	if ((e = serve__draft_open(cl, why, why_len)) != SHOAL_OK)
		goto fail;
	cl->pol.spread_experts = cfg->spread_experts;
	cl->pol.tensor_groups = cfg->tensor_groups;
#ifdef SHOAL_TEST_HOOKS
	/* test hook: a group even where it does not pay (tests/sh/tp_loopback.sh);
	 * those runs also plan every link at --link-us, not at the measured
	 * figures, so that a loaded loopback's control-path RTT (~1 ms) does
	 * not plan their group away. Only with ./configure --enable-test-hooks:
	 * a release binary plans as its peers do whatever its environment says */
	const char *prefer = getenv("SHOAL_TEST_TP_PREFER");
	cl->pol.tensor_prefer = cfg->tensor_groups && prefer && !strcmp(prefer, "1");
#endif
	shoal_wire_buf_init(&cl->msg);
	if (!(cl->ev = calloc(SHOAL_SERVE_EVENTS, sizeof *cl->ev)) ||
	    shoal_wire_buf_reserve(&cl->msg, SHOAL_RUN_MSG_RESERVE) != SHOAL_OK) {
		e = SHOAL_ERR_NOMEM;
		goto fail;
	}
	if (pthread_mutex_init(&cl->mu, NULL) != 0 || !(cl->mu_ok = true) ||
	    pthread_cond_init(&cl->cv, NULL) != 0 || !(cl->cv_ok = true)) {
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot make a mutex");
		goto fail;
	}
	if (pipe(cl->wake) != 0 || pipe(cl->evfd) != 0 || pipe(cl->xwake) != 0) {
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "pipe: %s", strerror(errno));
		goto fail;
	}
	for (int i = 0; i < 2; i++) {
		const int fds[3] = {cl->wake[i], cl->evfd[i], cl->xwake[i]};
		for (int j = 0; j < 3; j++) {
			fcntl(fds[j], F_SETFL, O_NONBLOCK);
			fcntl(fds[j], F_SETFD, FD_CLOEXEC);
		}
	}
	char hex[65];
	shoal_model_id_hex(cl->model_id, hex);
	SHOAL_LOG_I(
	    "cluster", "model %s (%s, %u layers), id %.16s; KV for %u tokens x %s sessions%s%s",
	    cl->model_path, shoal_arch_name(cl->model->hp.arch), cl->model->hp.n_layer, hex,
	    cl->pol.ctx, cfg->sessions ? "the given" : "as many as memory allows (from 1 to 16)",
	    cl->pol.spread_experts ? "; experts spread" : "",
	    cl->pol.tensor_groups ? "; tensor groups" : "");
	if ((e = serve__data_start(cl, why, why_len)) != SHOAL_OK)
		goto fail;
	*out = cl;
	return SHOAL_OK;
fail:
	shoal_serve_free(cl);
	return e;
}

void shoal_serve_free(shoal_serve *cl)
{
	if (!cl)
		return;
	serve__data_stop(cl);
	serve__draft_free(cl); /* its drafters went with the data thread's owner */
	shoal_weights_server_free(cl->wserve);
	shoal_weights_fetcher_free(cl->wf);
	for (size_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++) {
		free(cl->runs[i].prompt);
		free(cl->runs[i].grammar);
	}
	serve__free_assign(cl->pending);
	shoal_plan_free(cl->plan);
	shoal_plan_free(cl->prev);
	shoal_manifest_fini(&cl->mf);
	shoal_tokenizer_free(cl->tok);
	shoal_model_free(cl->model);
	shoal_model_id_free(cl->mid);
	shoal_wcache_free(cl->wc);
	for (int i = 0; i < 2; i++) {
		if (cl->wake[i] >= 0)
			close(cl->wake[i]);
		if (cl->evfd[i] >= 0)
			close(cl->evfd[i]);
		if (cl->xwake[i] >= 0)
			close(cl->xwake[i]);
	}
	if (cl->cv_ok)
		pthread_cond_destroy(&cl->cv);
	if (cl->mu_ok)
		pthread_mutex_destroy(&cl->mu);
	free(cl->ev);
	shoal_wire_buf_fini(&cl->msg);
	sodium_memzero(&cl->key, sizeof cl->key);
	free(cl);
}

/* ----------------------------------------------------------- the record */

void shoal_serve_fill_record(shoal_serve *cl, shoal_record *r, uint64_t mem_available)
{
	uint64_t raw = mem_available;
	if (cl->cfg.mem_limit && cl->cfg.mem_limit < raw)
		raw = cl->cfg.mem_limit;
	/* Round down to 1/64 of the top power of two (1.6-3 % steps: 8 MiB
	 * at 512 MiB..1 GiB, 1 GiB at 64..128 GiB), then keep the published
	 * figure while the raw one stays within 3 % of it: available memory
	 * wanders by a few percent and must not re-plan the cluster. */
	uint64_t top = 1;
	while (top <= raw / 2)
		top *= 2;
	uint64_t step = top >= 64 ? top / 64 : 1;
	uint64_t rounded = raw / step * step;
	if (!cl->offer || rounded > cl->offer + cl->offer / 33 ||
	    rounded + cl->offer / 33 < cl->offer)
		cl->offer = rounded;
	r->mem_weights = cl->offer;
	r->serving = 1;
	if (r->n_models == 0)
		r->n_models = 1;
	memcpy(r->models[0].digest, cl->model_id, SHOAL_MODEL_ID_BYTES);
	shoal_record_strcpy(r->models[0].path, sizeof r->models[0].path, cl->model_path);
	r->models[0].bytes = cl->file_bytes;
	memcpy(r->ready_digest, cl->ready_digest, SHOAL_DIGEST_BYTES);
	r->ready_epoch = cl->ready_epoch;
	r->served_epoch = cl->served_epoch;
	r->spec_mtp = cl->cfg.speculate == SHOAL_SPECULATE_MTP && cl->model->nextn;
	pthread_mutex_lock(&cl->mu);
	r->n_dsuspect = cl->n_dsus;
	memcpy(r->dsuspect, cl->dsus, cl->n_dsus * sizeof cl->dsus[0]);
	r->n_dlinks = cl->n_dlinks;
	memcpy(r->dlinks, cl->dlinks, cl->n_dlinks * sizeof cl->dlinks[0]);
	cl->dsus_published = cl->dsus_version;
	pthread_mutex_unlock(&cl->mu);
}

uint16_t shoal_serve_data_port(const shoal_serve *cl)
{
	return cl->listener ? shoal_xfer_listener_port(cl->listener) : 0;
}
