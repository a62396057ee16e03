/*
 * runtime/node/cluster.c: the node-thread half of runtime/node/cluster.h: open the
 * model, turn the gossiped view into a scheduler view and a plan, build the
 * local stage for a new plan and announce readiness, judge servability,
 * render the status "plan" object, and turn RUN_REQ into queued runs and
 * the data thread's events into RUN_TOKEN / RUN_END replies.
 *
 * Divisions: new/free; the record; planning; the assignment; status;
 * requests and replies.
 */
#include "config.h"

#include "runtime/node/cluster_impl.h"

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
#include "net/ctlmsg.h"
#include "net/linkview.h"
#include "models/prompt.h"
#include "runtime/node/plan_json.h"

/* ----------------------------------------------------------------- new/free */

/* First-start hashing of a large file: a bar on stderr when it is a
 * terminal, a log line per quarter otherwise (models/ prints nothing). */
static void shoal_cluster_hash_progress(void *ud, uint64_t done, uint64_t total)
{
	shoal_cluster *cl = ud;
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
static void shoal_cluster_plan_path(const shoal_cluster *cl, char *out, size_t cap)
{
	char hex[65];
	shoal_model_id_hex(cl->model_id, hex);
	snprintf(out, cap, "%s/plan-%.16s", cl->state_dir, hex);
}

static void shoal_cluster_plan_save(shoal_cluster *cl)
{
	uint8_t *enc = NULL;
	size_t len = 0;
	char path[1100], why[300];
	if (!cl->state_dir[0] || !cl->prev || shoal_plan_encode(cl->prev, &enc, &len) != SHOAL_OK)
		return;
	shoal_cluster_plan_path(cl, path, sizeof path);
	if (shoal_file_replace(path, enc, len, false, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("cluster", "cannot keep the plan: %s", why);
	free(enc);
}

static void shoal_cluster_plan_load(shoal_cluster *cl)
{
	char path[1100], why[200], dh[65];
	if (!cl->state_dir[0])
		return;
	shoal_cluster_plan_path(cl, path, sizeof path);
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	uint8_t buf[1 << 16];
	size_t len = fread(buf, 1, sizeof buf, f);
	bool whole = feof(f) && !ferror(f);
	fclose(f);
	shoal_plan *p = NULL;
	if (!whole || shoal_plan_decode(buf, len, &p, why, sizeof why) != SHOAL_OK ||
	    memcmp(shoal_plan_model_id(p), cl->model_id, 32)) {
		SHOAL_LOG_W("cluster", "ignoring the kept plan %s: %s", path,
		            !whole ? "too long" : p ? "another model's" : why);
		shoal_plan_free(p);
		return;
	}
	shoal_digest_hex(shoal_plan_digest(p), dh);
	SHOAL_LOG_I("cluster", "previous plan %.16s (epoch %llu) from the state directory", dh,
	            (unsigned long long)shoal_plan_epoch(p));
	cl->prev = p;
	cl->served_epoch = shoal_plan_epoch(p);
}

shoal_err shoal_cluster_new(const shoal_cluster_config *cfg, shoal_cluster **out, char *why,
                            size_t why_len)
{
	shoal_err e;
	*out = NULL;
	shoal_cluster *cl = calloc(1, sizeof *cl);
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
	cl->lctx_stage = (shoal_cluster_lctx){cl, SHOAL_CLUSTER_ROLE_STAGE};
	cl->lctx_owner = (shoal_cluster_lctx){cl, SHOAL_CLUSTER_ROLE_OWNER};
	cl->lctx_experts = (shoal_cluster_lctx){cl, SHOAL_CLUSTER_ROLE_EXPERTS};
	cl->lctx_tensor = (shoal_cluster_lctx){cl, SHOAL_CLUSTER_ROLE_TENSOR};
	snprintf(cl->plan_why, sizeof cl->plan_why, "no view yet");
	if ((e = shoal_model_open(cl->model_path, &cl->model, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_tokenizer_from_gguf(cl->model->gguf, &cl->tok, why, why_len)) != SHOAL_OK)
		goto fail;
	if (!cl->wc &&
	    (e = shoal_model_id_load_cb(cl->model->gguf, cl->state_dir[0] ? cl->state_dir : NULL,
	                                shoal_cluster_hash_progress, cl, &cl->mid, why, why_len)) !=
	        SHOAL_OK)
		goto fail;
	const shoal_model_id *mid = cl->wc ? shoal_wcache_id(cl->wc) : cl->mid;
	memcpy(cl->model_id, shoal_model_id_digest(mid), 32);
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
		memcpy(wcf.self, cfg->self, 16);
		memcpy(wcf.model_id, cl->model_id, 32);
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
	memcpy(cl->mf.model_id, cl->model_id, 32);
	shoal_cluster_plan_load(cl);
	shoal_policy_init(&cl->pol);
	/* As local `shoal run`: the model's context, at most 4096 unless asked
	 * (a 128k-token KV reservation would make most clusters infeasible). */
	cl->pol.ctx = cfg->ctx ? cfg->ctx : cl->model->hp.n_ctx_train;
	if (!cl->pol.ctx || (!cfg->ctx && cl->pol.ctx > SHOAL_CLUSTER_DEFAULT_CTX))
		cl->pol.ctx = SHOAL_CLUSTER_DEFAULT_CTX;
	cl->pol.sessions = cfg->sessions ? cfg->sessions : SHOAL_CLUSTER_SESSIONS; /* 0: per plan */
	if (cl->pol.sessions > SHOAL_CLUSTER_MAX_SESSIONS) {
		e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "at most %u sessions per stage",
		              SHOAL_CLUSTER_MAX_SESSIONS);
		goto fail;
	}
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
	if (!(cl->ev = calloc(SHOAL_CLUSTER_EVENTS, sizeof *cl->ev)) ||
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
	if ((e = shoal_cluster__data_start(cl, why, why_len)) != SHOAL_OK)
		goto fail;
	*out = cl;
	return SHOAL_OK;
fail:
	shoal_cluster_free(cl);
	return e;
}

void shoal_cluster_free(shoal_cluster *cl)
{
	if (!cl)
		return;
	shoal_cluster__data_stop(cl);
	shoal_weights_server_free(cl->wserve);
	shoal_weights_fetcher_free(cl->wf);
	for (size_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++)
		free(cl->runs[i].prompt);
	shoal_cluster__free_assign(cl->pending);
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

/* --------------------------------------------------------------- the record */

void shoal_cluster_fill_record(shoal_cluster *cl, shoal_record *r, uint64_t mem_available)
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
	memcpy(r->models[0].digest, cl->model_id, 32);
	shoal_record_strcpy(r->models[0].path, sizeof r->models[0].path, cl->model_path);
	r->models[0].bytes = cl->file_bytes;
	memcpy(r->ready_digest, cl->ready_digest, 32);
	r->ready_epoch = cl->ready_epoch;
	r->served_epoch = cl->served_epoch;
}

/* ----------------------------------------------------------------- planning */

/* A measured speed as the plan sees it: the quarter-octave bucket's value
 * (scheduler/view.h). Probes run once at start, so the bucket needs no
 * history; a zero (failed probe) counts as 1 GB/s or 1 GFLOP/s. */
static uint64_t shoal_cluster_speed(uint64_t per_s_millions)
{
	uint64_t raw = per_s_millions ? per_s_millions * 1000000u : 1000000000u;
	return shoal_bucket_geo_value(shoal_bucket_geo(raw, SHOAL_BUCKET_NONE));
}

static void shoal_cluster_left(shoal_cluster *cl, const shoal_swim_member *m, const char *fmt,
                               const char *arg)
{
	if (cl->n_left >= SHOAL_CLUSTER_MAX_PEERS)
		return;
	cl->left[cl->n_left].id = m->id;
	snprintf(cl->left[cl->n_left].name, sizeof cl->left[0].name, "%s", m->record.name);
	snprintf(cl->left[cl->n_left].why, sizeof cl->left[0].why, fmt, arg);
	cl->n_left++;
}

static shoal_err shoal_cluster_build_assign(shoal_cluster *cl, shoal_cluster_assign **out,
                                            char *why, size_t why_len);
static int shoal_cluster_take_part(shoal_cluster *cl);

/* schedule() over the candidates (all but `skip`, when given): a view of
 * their offered memory and bucketed speeds. Load is left out: each peer
 * would bucket it from its own history of the others' records, and the
 * plans would differ. Links are the ones the candidates measured and
 * gossiped (net/linkview.h: already bucketed by the peer that measured
 * them, so the same for everyone); a pair nobody measured yet is at 200
 * us. An explicit --link-us puts every link at that figure instead. */
/* Whether plans take the measured links: only with tensor groups (the
 * choice between a group and a pipeline is what the latency decides; a
 * pipeline-only cluster keeps every link at 200 us, so new link figures
 * never re-plan it), and never with an explicit --link-us or the test hook
 * SHOAL_TEST_TP_PREFER. */
static bool shoal_cluster_measured_links(const shoal_cluster *cl)
{
	return cl->pol.tensor_groups && !cl->pol.tensor_prefer && !cl->cfg.link_us;
}

static shoal_err shoal_cluster_plan_on(shoal_cluster *cl, const shoal_swim_member *const *cand,
                                       size_t nc, const uint8_t *skip, const shoal_plan *prev,
                                       shoal_plan **out, uint32_t *sessions, char *why,
                                       size_t why_len)
{
	uint32_t lus = cl->cfg.link_us ? cl->cfg.link_us : SHOAL_CLUSTER_LINK_US;
	shoal_view *view = shoal_view_new((uint64_t)lus * 1000u, SHOAL_CLUSTER_LINK_BW);
	shoal_err e = view ? SHOAL_OK : SHOAL_ERR_NOMEM;
	const shoal_record *recs[SHOAL_CLUSTER_MAX_PEERS];
	size_t nr = 0;
	for (size_t i = 0; i < nc && e == SHOAL_OK; i++) {
		const shoal_record *r = &cand[i]->record;
		if ((skip && !memcmp(r->id.b, skip, 16)) || nr == SHOAL_CLUSTER_MAX_PEERS)
			continue;
		recs[nr++] = r;
		shoal_view_peer p;
		memset(&p, 0, sizeof p);
		p.id = r->id;
		snprintf(p.name, sizeof p.name, "%s", r->name);
		p.mem_bytes = r->mem_weights;
		p.mem_bw = shoal_cluster_speed(r->compute_mb_s);
		p.flops = shoal_cluster_speed(r->compute_mflops);
		p.load_pct = 0;
		e = shoal_view_add_peer(view, &p, why, why_len);
	}
	if (e == SHOAL_OK && shoal_cluster_measured_links(cl))
		e = shoal_linkview_apply(view, recs, nr, NULL, why, why_len);
	if (e == SHOAL_OK && !skip) {
		size_t nl = shoal_view_n_links(view);
		cl->n_plan_links = nl < SHOAL_CLUSTER_MAX_PEERS ? nl : SHOAL_CLUSTER_MAX_PEERS;
		for (size_t i = 0; i < cl->n_plan_links; i++)
			shoal_view_link_at(view, i, &cl->plan_links[i].a, &cl->plan_links[i].b,
			                   &cl->plan_links[i].latency_ns, &cl->plan_links[i].bw);
	}
	shoal_policy pol = cl->pol;
	if (e == SHOAL_OK && cl->cfg.sessions)
		e = shoal_schedule(view, &cl->mf, &pol, prev, out, why, why_len);
	else if (e == SHOAL_OK) /* sessions from memory: scheduler/plan.h */
		e = shoal_schedule_sessions(view, &cl->mf, &pol, prev, out, why, why_len);
	if (sessions)
		*sessions = pol.sessions;
	shoal_view_free(view);
	return e;
}

/* shoal_cluster_plan_on for the plan we act on next. The epoch floor (the
 * cluster's highest served epoch) rises when a peer finds our current
 * plan servable, before the others do; renumbering that plan then would
 * make the peers chase each other's floors. So when the floor has not
 * passed our current plan's epoch, no candidate announced another plan,
 * and the same inputs, numbered from just below that epoch, give our
 * current plan again, it stays as it is. */
static shoal_err shoal_cluster_plan_next(shoal_cluster *cl, const shoal_swim_member *const *cand,
                                         size_t nc, const shoal_plan *prev, shoal_plan **out,
                                         uint32_t *sessions, char *why, size_t why_len)
{
	shoal_err e = shoal_cluster_plan_on(cl, cand, nc, NULL, prev, out, sessions, why, why_len);
	const shoal_plan *cur = cl->plan;
	if (e != SHOAL_OK || !cur || !memcmp(shoal_plan_digest(*out), shoal_plan_digest(cur), 32) ||
	    shoal_plan_epoch(cur) < cl->pol.epoch_floor || shoal_plan_epoch(cur) == 0)
		return e;
	/* only while nobody announced another plan: a peer that moved on
	 * (e.g. restarted and planned from scratch) must be followed */
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		if (r->ready_epoch && memcmp(r->ready_digest, shoal_plan_digest(cur), 32))
			return e;
	}
	uint64_t floor = cl->pol.epoch_floor;
	shoal_plan *q = NULL;
	uint32_t qs = 0;
	char w[256];
	cl->pol.epoch_floor = shoal_plan_epoch(cur) - 1;
	shoal_err eq = shoal_cluster_plan_on(cl, cand, nc, NULL, prev, &q, &qs, w, sizeof w);
	cl->pol.epoch_floor = floor;
	if (eq == SHOAL_OK && !memcmp(shoal_plan_digest(q), shoal_plan_digest(cur), 32)) {
		shoal_plan_free(*out);
		*out = q;
		if (sessions)
			*sessions = qs;
		return SHOAL_OK;
	}
	shoal_plan_free(q);
	return e;
}

/* Whether the previous plan may steer the scheduler: no candidate
 * announced another plan. A peer that announced nothing yet (it just
 * joined, or restarted: named by prev, it learns prev from us and takes
 * its part again, so a restart changes no plan) does not block it. Peers
 * that plan from different previous plans would never agree: one that
 * announces another plan sends everyone to the common ground, a plan from
 * scratch. Readiness for `next`, the plan computed from prev, counts too:
 * peers that already moved to it (a joiner, or all of us while it loads)
 * agree with us. */
static bool shoal_cluster_prev_usable(const shoal_plan *prev, const shoal_plan *next,
                                      const shoal_swim_member *const *cand, size_t nc)
{
	if (!prev)
		return false;
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		bool ready = r->ready_epoch &&
		             (!memcmp(r->ready_digest, shoal_plan_digest(prev), 32) ||
		              (next && !memcmp(r->ready_digest, shoal_plan_digest(next), 32)));
		if (!ready && r->ready_epoch)
			return false;
	}
	return true;
}

/* A peer that joins a serving cluster has no previous plan. When every
 * other candidate is ready for one digest D, recompute their plan from
 * scratch on their view: if it is D, it becomes our previous plan too, so
 * we keep theirs instead of forcing a re-plan. (Fails harmlessly when D
 * itself was kept from an older plan: everybody then re-plans.) */
static void shoal_cluster_learn_prev(shoal_cluster *cl, const shoal_swim_member *const *cand,
                                     size_t nc)
{
	const uint8_t *d = NULL;
	size_t others = 0;
	uint64_t epoch = 0;
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		if (!memcmp(r->id.b, cl->cfg.self, 16))
			continue;
		if (!r->ready_epoch || (d && memcmp(d, r->ready_digest, 32)))
			return;
		d = r->ready_digest;
		epoch = r->ready_epoch;
		others++;
	}
	if (!d || (!memcmp(d, cl->learn_tried, 32) && cl->learn_tried_n == nc) ||
	    (cl->prev && !memcmp(d, shoal_plan_digest(cl->prev), 32)))
		return;
	/* tried again when the view grows (a joiner sees its seed first) */
	memcpy(cl->learn_tried, d, 32);
	cl->learn_tried_n = nc;
	shoal_plan *p = NULL;
	char why[256], dh[65];
	/* their plan was numbered from the floor they saw then; it is over
	 * their view without us (we join), or with us (we restarted: the
	 * plan names us) */
	uint64_t floor = cl->pol.epoch_floor;
	cl->pol.epoch_floor = epoch - 1;
	shoal_err e = SHOAL_ERR_STATE;
	for (int with_self = 0; with_self < 2 && e != SHOAL_OK; with_self++) {
		e = shoal_cluster_plan_on(cl, cand, nc, with_self ? NULL : cl->cfg.self, NULL, &p,
		                          NULL, why, sizeof why);
		if (e == SHOAL_OK && memcmp(shoal_plan_digest(p), d, 32)) {
			shoal_plan_free(p);
			p = NULL;
			e = SHOAL_ERR_STATE;
		}
	}
	cl->pol.epoch_floor = floor;
	if (e != SHOAL_OK)
		return;
	shoal_digest_hex(d, dh);
	SHOAL_LOG_I("cluster", "joined a cluster serving plan %.16s (%zu peer(s)): kept as ours",
	            dh, others);
	shoal_plan_free(cl->prev);
	cl->prev = p;
}

/* Peers (alive, compatible) that serve another model id than ours, one
 * entry per model id, in view order. */
typedef struct shoal_cluster_other {
	uint8_t id[32];
	size_t n;
	char first[SHOAL_RECORD_NAME_MAX]; /* the first such peer's name */
} shoal_cluster_other;

static void shoal_cluster_other_add(shoal_cluster_other *o, size_t *no, const shoal_swim_member *m)
{
	size_t i = 0;
	while (i < *no && memcmp(o[i].id, m->record.models[0].digest, 32))
		i++;
	if (i == *no) {
		if (*no >= SHOAL_CLUSTER_MAX_PEERS)
			return;
		memcpy(o[i].id, m->record.models[0].digest, 32);
		o[i].n = 0;
		snprintf(o[i].first, sizeof o[i].first, "%s", m->record.name);
		(*no)++;
	}
	o[i].n++;
}

/* Whether more peers serve one other model than ours (nc peers, us
 * included): then that is the cluster's model, we are the one left out of
 * its plan, and we plan nothing rather than serve our file alone; why says
 * so. A tie leaves each group serving its own model. Logs, once per
 * change, which peers serve another model. */
static bool shoal_cluster_outvoted(shoal_cluster *cl, const shoal_cluster_other *o, size_t no,
                                   size_t nc, char *why, size_t why_len)
{
	size_t big = 0, others = 0;
	for (size_t i = 0; i < no; i++) {
		others += o[i].n;
		if (o[i].n > o[big].n)
			big = i;
	}
	char theirs[65] = "", ours[65] = "", line[sizeof cl->others_why] = "";
	bool out = no && o[big].n > nc;
	if (no) {
		shoal_model_id_hex(o[big].id, theirs);
		shoal_model_id_hex(cl->model_id, ours);
		snprintf(line, sizeof line,
		         "%zu peer(s) (first %s) serve model id %.16s, %zu (us included) our "
		         "model id %.16s: %s",
		         o[big].n, o[big].first, theirs, nc, ours,
		         out ? "their plan leaves us out, and we serve nothing (is our --model "
		               "another file than theirs?)"
		             : "they are left out of our plan");
	}
	if (strcmp(line, cl->others_why)) {
		if (no)
			SHOAL_LOG_W("cluster", "%s%s", line,
			            others > o[big].n ? "; more peers serve other models" : "");
		snprintf(cl->others_why, sizeof cl->others_why, "%s", line);
	}
	if (out)
		snprintf(why, why_len,
		         "left out of the cluster's plan: our model file differs from the "
		         "cluster's (%zu peer(s), first %s, serve model id %.16s; ours is %.16s)",
		         o[big].n, o[big].first, theirs, ours);
	return out;
}

/* A peer of our current plan is dead in the view (not left: a leave is
 * announced). */
static bool shoal_cluster_plan_peer_died(const shoal_cluster *cl, const shoal_swim_member *v,
                                         size_t n)
{
	if (!cl->plan)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (v[i].state != SHOAL_SWIM_STATE_DEAD)
			continue;
		for (size_t k = 0; k < shoal_plan_n_peers(cl->plan); k++)
			if (!memcmp(shoal_plan_peer_at(cl->plan, k)->id.b, v[i].id.b, 16))
				return true;
	}
	return false;
}

int shoal_cluster_update(shoal_cluster *cl, const shoal_swim_member *v, size_t n)
{
	char why[256] = "";
	int republish = 0;
	/* 1. Candidates: alive, compatible, serving our model id. */
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, 32);
	cl->n_left = 0;
	size_t nc = 0, no = 0;
	const shoal_swim_member *cand[SHOAL_CLUSTER_MAX_PEERS] = {0};
	shoal_cluster_other other[SHOAL_CLUSTER_MAX_PEERS];
	for (size_t i = 0; i < n; i++) {
		const shoal_swim_member *m = &v[i];
		char hex[65];
		if (m->state != SHOAL_SWIM_STATE_ALIVE && m->state != SHOAL_SWIM_STATE_SUSPECT)
			continue;
		if (!m->compatible) {
			shoal_cluster_left(cl, m, "%s", m->why_incompatible);
			continue;
		}
		if (!m->record.serving || m->record.n_models == 0) {
			shoal_cluster_left(cl, m, "%s", "serves no model (no --model)");
			continue;
		}
		if (memcmp(m->record.models[0].digest, cl->model_id, 32)) {
			shoal_model_id_hex(m->record.models[0].digest, hex);
			shoal_cluster_left(cl, m, "its model id %.16s... differs from ours", hex);
			shoal_cluster_other_add(other, &no, m);
			continue;
		}
		if (nc >= SHOAL_CLUSTER_MAX_PEERS)
			continue;
		cand[nc++] = m;
		const shoal_record *r = &m->record;
		crypto_generichash_update(&hs, r->id.b, 16);
		crypto_generichash_update(&hs, (const uint8_t *)&r->mem_weights, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&r->compute_mb_s, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&r->compute_mflops, 8);
		crypto_generichash_update(&hs, (const uint8_t *)r->ctl_endpoint,
		                          strlen(r->ctl_endpoint));
		for (uint32_t k = 0; k < r->n_data_ep; k++)
			crypto_generichash_update(&hs, (const uint8_t *)r->data_ep[k].addr,
			                          strlen(r->data_ep[k].addr));
		/* measured links (bucketed where measured: they change when a
		 * link does, not with its jitter), where the plan uses them */
		for (uint32_t k = 0; shoal_cluster_measured_links(cl) && k < r->n_links; k++) {
			const shoal_record_link *l = &r->links[k];
			crypto_generichash_update(&hs, l->peer.b, 16);
			crypto_generichash_update(&hs, (const uint8_t *)&l->rtt_us, 4);
			crypto_generichash_update(&hs, (const uint8_t *)&l->bw_bytes_s, 8);
		}
	}
	/* readiness is an input too: whether the previous plan may be used
	 * depends on it (shoal_cluster_prev_usable) */
	for (size_t i = 0; i < nc; i++) {
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->record.ready_epoch, 8);
		crypto_generichash_update(&hs, cand[i]->record.ready_digest, 32);
		/* a restart: the data thread must know the new incarnation */
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->incarnation, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->record.served_epoch, 8);
	}
	/* new plans are numbered above every epoch served so far */
	cl->pol.epoch_floor = cl->served_epoch;
	for (size_t i = 0; i < nc; i++)
		if (cand[i]->record.served_epoch > cl->pol.epoch_floor)
			cl->pol.epoch_floor = cand[i]->record.served_epoch;
	char left_why[256] = "";
	bool outvoted = shoal_cluster_outvoted(cl, other, no, nc, left_why, sizeof left_why);
	crypto_generichash_update(&hs, (const uint8_t *)left_why, strlen(left_why));
	uint8_t sig[32];
	crypto_generichash_final(&hs, sig, 32);

	/* 2. Re-plan only when the planning inputs changed. */
	if (!cl->have_sig || memcmp(sig, cl->view_sig, 32)) {
		memcpy(cl->view_sig, sig, 32);
		cl->have_sig = true;
		/* endpoints for the data thread */
		pthread_mutex_lock(&cl->mu);
		cl->n_eps = 0;
		for (size_t i = 0; i < nc; i++) {
			const shoal_record *r = &cand[i]->record;
			shoal_cluster_ep *ep = &cl->eps[cl->n_eps];
			int pick = -1;
			/* loopback talks to loopback: prefer an endpoint whose
			 * kind matches our data host's */
			int want_lo =
			    !strncmp(cl->cfg.data_host ? cl->cfg.data_host : "", "127.", 4);
			for (uint32_t k = 0; k < r->n_data_ep && pick < 0; k++)
				if ((strncmp(r->data_ep[k].addr, "tcp://127.", 10) == 0) == want_lo)
					pick = (int)k;
			if (pick < 0 && r->n_data_ep)
				pick = 0;
			if (pick < 0)
				continue;
			const char *a = r->data_ep[pick].addr +
			                (strncmp(r->data_ep[pick].addr, "tcp://", 6) ? 0 : 6);
			const char *colon = strrchr(a, ':');
			if (!colon || (size_t)(colon - a) >= sizeof ep->host)
				continue;
			memcpy(ep->host, a, (size_t)(colon - a));
			ep->host[colon - a] = '\0';
			ep->port = (uint16_t)atoi(colon + 1);
			memcpy(ep->id, r->id.b, 16);
			ep->inc = cand[i]->incarnation;
			cl->n_eps++;
		}
		cl->eps_version++;
		pthread_mutex_unlock(&cl->mu);

		/* From the previous plan when the peers can agree on it (our own
		 * last servable one, else the one learned from the peers we
		 * joined), else from scratch. */
		shoal_plan *np = NULL;
		uint32_t np_sessions = 0;
		shoal_err e = SHOAL_ERR_STATE;
		for (int attempt = 0; attempt < 2 && e != SHOAL_OK && !outvoted; attempt++) {
			if (attempt == 1)
				shoal_cluster_learn_prev(cl, cand, nc);
			if (!cl->prev)
				continue;
			e = shoal_cluster_plan_next(cl, cand, nc, cl->prev, &np, &np_sessions, why,
			                            sizeof why);
			if (e == SHOAL_OK && !shoal_cluster_prev_usable(cl->prev, np, cand, nc)) {
				shoal_plan_free(np);
				np = NULL;
				e = SHOAL_ERR_STATE;
			}
		}
		if (outvoted)
			e = shoal_why(why, sizeof why, SHOAL_ERR_INFEASIBLE, "%s", left_why);
		else if (e != SHOAL_OK)
			e = shoal_cluster_plan_next(cl, cand, nc, NULL, &np, &np_sessions, why,
			                            sizeof why);
		if (e != SHOAL_OK) {
			/* a warning only when a peer of the plan died: at start (peers
			 * still joining) and when a peer leaves, us included, it is
			 * normal */
			bool died = shoal_cluster_plan_peer_died(cl, v, n);
			if (strcmp(cl->plan_why, why) || cl->plan)
				shoal_log(died ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "cluster",
				          "no plan over %zu peer(s): %s", nc,
				          why[0] ? why : shoal_strerror(e));
			if (cl->plan)
				cl->died_us = died ? shoal_clock_now_us() : 0;
			snprintf(cl->plan_why, sizeof cl->plan_why, "%s",
			         why[0] ? why : shoal_strerror(e));
			cl->plan_err = e;
			shoal_plan_free(cl->plan);
			cl->plan = NULL;
		} else if (!cl->plan ||
		           memcmp(shoal_plan_digest(np), shoal_plan_digest(cl->plan), 32)) {
			char dh[65];
			shoal_digest_hex(shoal_plan_digest(np), dh);
			SHOAL_LOG_I("cluster",
			            "plan epoch %llu digest %.16s: %zu stage(s) over %zu peer(s), "
			            "%u session(s), %.3f ms/token predicted",
			            (unsigned long long)shoal_plan_epoch(np), dh,
			            shoal_plan_n_stages(np), shoal_plan_n_peers(np), np_sessions,
			            (double)shoal_plan_predicted_ns(np) / 1e6);
			for (size_t s = 0; s < shoal_plan_n_stages(np); s++) {
				const shoal_plan_stage *st = shoal_plan_stage_at(np, s);
				shoal_plan_member gm[SHOAL_DIST_TP_MAX];
				size_t ng = shoal_plan_stage_members(np, s, gm, SHOAL_DIST_TP_MAX);
				char grp[256] = "";
				for (size_t j = 0, o = 0; j < ng && j < SHOAL_DIST_TP_MAX; j++) {
					int w = snprintf(grp + o, sizeof grp - o, "%s%s",
					                 j ? ", " : " with its tensor group ",
					                 shoal_plan_peer_at(np, gm[j].peer)->name);
					if (w < 0 || (size_t)w >= sizeof grp - o)
						break;
					o += (size_t)w;
				}
				SHOAL_LOG_I("cluster", "  stage %zu: %s layers [%u, %u)%s", s,
				            shoal_plan_peer_at(np, st->peer)->name, st->first_layer,
				            st->end_layer, grp);
			}
			shoal_plan_free(cl->plan);
			cl->plan = np;
			cl->plan_sessions = np_sessions;
			np = NULL;
			cl->plan_why[0] = '\0';
			/* 3. Our part: unless it is the plan whose part the data
			 * thread runs (a plan that came back after a moment without
			 * one: its stage stays, with its sessions), build it (fetched
			 * first when missing) and announce readiness for the digest. */
			bool in_force = cl->ready_epoch && cl->ready_epoch == shoal_plan_epoch(cl->plan) &&
			                !memcmp(cl->ready_digest, shoal_plan_digest(cl->plan), 32);
			if (in_force) {
				SHOAL_LOG_I("cluster", "plan %.16s is back: our part of it stays as it is",
				            dh);
				cl->part_taken = true;
				pthread_mutex_lock(&cl->mu);
				memcpy(cl->shared_digest, shoal_plan_digest(cl->plan), 32);
				cl->shared_epoch = shoal_plan_epoch(cl->plan);
				pthread_mutex_unlock(&cl->mu);
			} else {
				cl->part_taken = false;
				cl->ready_epoch = 0;
				memset(cl->ready_digest, 0, 32);
				shoal_cluster_take_part(cl);
			}
			cl->servable = false;
			republish = 1;
		}
		shoal_plan_free(np);
	}
	/* a fetch that ended lets us take our part now */
	republish |= shoal_cluster_take_part(cl);

	/* 4. Servable when every peer of the plan announced its digest. */
	cl->n_cand = nc;
	bool servable = false;
	if (cl->plan) {
		shoal_ready *rd = shoal_ready_new();
		for (size_t i = 0; rd && i < nc; i++) {
			const shoal_record *r = &cand[i]->record;
			cl->cand[i].id = r->id;
			cl->cand[i].ready =
			    r->ready_epoch &&
			    !memcmp(r->ready_digest, shoal_plan_digest(cl->plan), 32);
			if (r->ready_epoch)
				shoal_ready_announce(rd, &cl->cand[i].id, r->ready_digest);
		}
		servable = rd && shoal_ready_servable(rd, cl->plan);
		uint32_t missing[SHOAL_CLUSTER_MAX_PEERS];
		size_t nm =
		    rd ? shoal_ready_missing(rd, cl->plan, missing, SHOAL_CLUSTER_MAX_PEERS) : 0;
		if (!servable && cl->ready_why[0])
			snprintf(why, sizeof why, "not ready here: %.200s", cl->ready_why);
		else if (!servable)
			snprintf(why, sizeof why, "waiting for %zu peer(s) to be ready, first %s",
			         nm, nm ? shoal_plan_peer_at(cl->plan, missing[0])->name : "?");
		/* a peer that stays ready for another plan of the same peers
		 * most likely plans with another policy: say which options */
		for (size_t i = 0; !servable && nm && i < nc; i++) {
			const shoal_record *r = &cand[i]->record;
			if (memcmp(r->id.b, shoal_plan_peer_at(cl->plan, missing[0])->id.b, 16) ||
			    !r->ready_epoch)
				continue;
			size_t l = strlen(why);
			snprintf(why + l, sizeof why - l,
			         " (it is ready for another plan, epoch %llu: if this lasts, do all "
			         "peers give the same --ctx, --sessions, --spread-experts, --tensor, "
			         "--link-us?)",
			         (unsigned long long)r->ready_epoch);
		}
		shoal_ready_free(rd);
	} else {
		snprintf(why, sizeof why, "no plan: %.200s", cl->plan_why);
	}
	pthread_mutex_lock(&cl->mu);
	snprintf(cl->shared_why, sizeof cl->shared_why, "%s", servable ? "" : why);
	/* refused at once unless a peer of the plan died a moment ago */
	bool died_lately = cl->died_us && shoal_clock_now_us() - cl->died_us <
	                                      (uint64_t)SHOAL_CLUSTER_DIED_WAIT_MULT *
	                                          cl->cfg.base_ms * 1000u;
	cl->shared_infeasible = !cl->plan && cl->plan_err == SHOAL_ERR_INFEASIBLE && !died_lately;
	cl->shared_noplan = !cl->plan;
	pthread_mutex_unlock(&cl->mu);
	if (servable != cl->servable) {
		cl->servable = servable;
		SHOAL_LOG_I("cluster", "plan %s",
		            servable ? "servable: every peer is ready" : "not servable");
		if (servable) {
			shoal_plan_free(cl->prev);
			cl->prev = shoal_plan_dup(cl->plan);
			shoal_cluster_plan_save(cl);
			if (shoal_plan_epoch(cl->plan) > cl->served_epoch) {
				cl->served_epoch = shoal_plan_epoch(cl->plan);
				republish = 1;
			}
		}
		pthread_mutex_lock(&cl->mu);
		cl->shared_servable = servable;
		pthread_mutex_unlock(&cl->mu);
		shoal_cluster__wake(cl);
	}
	return republish;
}

/* ------------------------------------------------------------ the assignment */

/* Tensor ix (UINT32_MAX: none) appended to out[n] unless there already or
 * out is full; returns the new count. Each tensor once (a tied head is the
 * embedding): out[cap] has room for every tensor of the file, and a
 * duplicate must not take the place of the last (a one-stage part of a
 * tied model lost its last layer's last tensor so). */
static size_t shoal_cluster_part_add(uint32_t *out, size_t n, size_t cap, uint32_t ix)
{
	for (size_t j = 0; j < n; j++)
		if (out[j] == ix)
			return n;
	if (ix != UINT32_MAX && n < cap)
		out[n++] = ix;
	return n;
}

/* The tensors (file order) our part of cl->plan computes with: the layers
 * of our stage, the embedding (stage 0), the head and final norm (the last
 * stage), the rope table, and the expert stacks and routers of layers
 * where we hold an expert (whole stacks: their digests cover all experts).
 * A tensor group's member computes with shares of its stage's matrices,
 * and of the head's in the last stage, but fetches them whole, as the
 * stacks (a tensor's digest covers all of it); it embeds in stage 0 as
 * every member does. Returns how many went into out[cap]. */
static size_t shoal_cluster_part_tensors(const shoal_cluster *cl, uint32_t *out, size_t cap)
{
	const shoal_plan *p = cl->plan;
	const shoal_model *m = cl->model;
	const shoal_gguf_tensor *base = shoal_gguf_tensor_at(m->gguf, 0);
	size_t n = 0;
	long self = -1;
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!memcmp(shoal_plan_peer_at(p, i)->id.b, cl->cfg.self, 16))
			self = (long)i;
	if (self < 0)
		return 0;
#define PART_ADD(t)                                                                                \
	(n = shoal_cluster_part_add(out, n, cap, (t) ? (uint32_t)((t)-base) : UINT32_MAX))
	size_t ns = shoal_plan_n_stages(p);
	for (size_t st = 0; st < ns; st++) {
		const shoal_plan_stage *ps = shoal_plan_stage_at(p, st);
		shoal_plan_member mem[SHOAL_DIST_TP_MAX];
		size_t nm = shoal_plan_stage_members(p, st, mem, SHOAL_DIST_TP_MAX);
		bool ours = ps->peer == (uint32_t)self;
		for (size_t j = 0; j < nm && j < SHOAL_DIST_TP_MAX; j++)
			ours |= mem[j].peer == (uint32_t)self;
		if (!ours)
			continue;
		if (st == 0)
			PART_ADD(m->tok_embd);
		if (st == ns - 1) {
			PART_ADD(m->output_norm);
			PART_ADD(m->output);
		}
		for (uint32_t l = ps->first_layer; l < ps->end_layer && l < m->hp.n_layer; l++) {
			const shoal_layer *y = &m->layers[l];
			const shoal_gguf_tensor *ts[SHOAL_LAYER_MAX_TENSORS];
			size_t nt = shoal_layer_own_tensors(y, ts);
			for (size_t k = 0; k < nt; k++)
				PART_ADD(ts[k]);
			PART_ADD(y->ffn_gate_exps);
			PART_ADD(y->ffn_up_exps);
			PART_ADD(y->ffn_down_exps);
		}
	}
	for (uint32_t l = 0; m->hp.n_expert && l < m->hp.n_layer; l++) {
		bool mine = false;
		for (uint32_t x = 0; x < shoal_plan_layer_n_expert(p, l) && !mine; x++) {
			uint32_t own[SHOAL_PLAN_MAX_OWNERS];
			size_t no = shoal_plan_expert_owners(p, l, x, own);
			for (size_t j = 0; j < no; j++)
				mine |= own[j] == (uint32_t)self;
		}
		if (mine) {
			PART_ADD(m->layers[l].ffn_gate_inp);
			PART_ADD(m->layers[l].ffn_gate_exps);
			PART_ADD(m->layers[l].ffn_up_exps);
			PART_ADD(m->layers[l].ffn_down_exps);
		}
	}
	if (n)
		PART_ADD(m->rope_freqs);
#undef PART_ADD
	return n;
}

/* With a weights cache: true while tensors of our part are missing; then a
 * fetch runs (or is started here from the plan's other peers, or waits to
 * be tried again after a failure) and ready_why says so. */
static bool shoal_cluster_fetch_wait(shoal_cluster *cl)
{
	size_t cap = shoal_gguf_n_tensors(cl->model->gguf);
	uint32_t *need = malloc((cap ? cap : 1) * sizeof *need);
	if (!need) {
		snprintf(cl->ready_why, sizeof cl->ready_why, "out of memory");
		return true;
	}
	size_t nn = shoal_cluster_part_tensors(cl, need, cap), missing = 0;
	uint64_t bytes = 0, miss_bytes = 0;
	for (size_t i = 0; i < nn; i++) {
		uint64_t b = shoal_model_id_tensor_bytes(shoal_wcache_id(cl->wc), need[i]);
		bytes += b;
		if (!shoal_wcache_has(cl->wc, need[i])) {
			need[missing++] = need[i];
			miss_bytes += b;
		}
	}
	shoal_weights_progress pr;
	shoal_weights_get_progress(cl->wf, &pr);
	if (!missing) {
		free(need);
		if (!pr.fetched) /* this start fetched nothing: the cache held it all */
			cl->cache_hit_bytes = bytes;
		SHOAL_LOG_I("weights", "our part: %zu tensor(s), %.1f MiB, all in the cache%s", nn,
		            (double)bytes / 1048576.0, pr.fetched ? "" : " (cache hit: nothing fetched)");
		return false;
	}
	uint64_t now = shoal_clock_now_us();
	if (!pr.running && pr.failed && !cl->fetch_failed_seen) {
		cl->fetch_failed_seen = true;
		cl->fetch_retry_us = now + 1000000u; /* gossip settles meanwhile */
		snprintf(cl->ready_why, sizeof cl->ready_why, "fetching weights failed: %.200s",
		         pr.why);
	}
	if (pr.running || now < cl->fetch_retry_us) {
		free(need);
		return true;
	}
	shoal_weights_src src[SHOAL_CLUSTER_MAX_PEERS];
	size_t ns = 0;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_eps; i++) {
		if (!memcmp(cl->eps[i].id, cl->cfg.self, 16))
			continue;
		memcpy(src[ns].id, cl->eps[i].id, 16);
		snprintf(src[ns].host, sizeof src[ns].host, "%s", cl->eps[i].host);
		src[ns].port = cl->eps[i].port;
		char hex[33];
		shoal_hex_encode(cl->eps[i].id, 16, hex);
		snprintf(src[ns].name, sizeof src[ns].name, "%.8s", hex);
		for (size_t k = 0; cl->plan && k < shoal_plan_n_peers(cl->plan); k++)
			if (!memcmp(shoal_plan_peer_at(cl->plan, k)->id.b, cl->eps[i].id, 16))
				snprintf(src[ns].name, sizeof src[ns].name, "%s",
				         shoal_plan_peer_at(cl->plan, k)->name);
		ns++;
	}
	pthread_mutex_unlock(&cl->mu);
	if (!ns) {
		snprintf(cl->ready_why, sizeof cl->ready_why,
		         "%zu tensor(s) of our part missing and no peer to fetch them from", missing);
	} else if (shoal_weights_start(cl->wf, src, ns, cl->wc, need, missing) == SHOAL_OK) {
		cl->fetch_failed_seen = false;
		snprintf(cl->ready_why, sizeof cl->ready_why,
		         "fetching %zu tensor(s) of our part (%.1f MiB) from the peers", missing,
		         (double)miss_bytes / 1048576.0);
		SHOAL_LOG_I("weights", "our part: %zu tensor(s), %.1f MiB; %zu missing (%.1f MiB)",
		            nn, (double)bytes / 1048576.0, missing, (double)miss_bytes / 1048576.0);
	}
	free(need);
	return true;
}

/* Our part of cl->plan, once per plan: with a weights cache, only when its
 * tensors are all there (else a fetch runs and this is tried again each
 * update); then built, handed to the data thread and announced. Returns 1
 * when readiness changed. */
static int shoal_cluster_take_part(shoal_cluster *cl)
{
	if (cl->part_taken || !cl->plan || (cl->wc && shoal_cluster_fetch_wait(cl)))
		return 0;
	cl->part_taken = true;
	char dh[65], why[256] = "";
	shoal_digest_hex(shoal_plan_digest(cl->plan), dh);
	shoal_cluster_assign *a = NULL;
	shoal_err e = shoal_cluster_build_assign(cl, &a, why, sizeof why);
	if (e != SHOAL_OK) {
		SHOAL_LOG_W("cluster", "cannot load our part of plan %.16s: %s", dh, why);
		snprintf(cl->ready_why, sizeof cl->ready_why, "%s", why);
		cl->ready_epoch = 0;
		memset(cl->ready_digest, 0, 32);
		return 1;
	}
	pthread_mutex_lock(&cl->mu);
	shoal_cluster__free_assign(cl->pending);
	cl->pending = a;
	cl->pending_set = true;
	cl->shared_servable = false;
	memcpy(cl->shared_digest, shoal_plan_digest(cl->plan), 32);
	cl->shared_epoch = shoal_plan_epoch(cl->plan);
	pthread_mutex_unlock(&cl->mu);
	shoal_cluster__wake(cl);
	cl->ready_why[0] = '\0';
	memcpy(cl->ready_digest, shoal_plan_digest(cl->plan), 32);
	cl->ready_epoch = shoal_plan_epoch(cl->plan);
	SHOAL_LOG_I("cluster", "ready for digest %.16s (epoch %llu)", dh,
	            (unsigned long long)cl->ready_epoch);
	return 1;
}

/* Stage config c of member `me` of a tensor group mem[n] (plan order):
 * member 0 is the entry (the plan's stage peer: the previous stage and the
 * owners send to it, it relays); in the last stage every member computes
 * its share of the head and the head peer gathers the logits and samples
 * (invariant 10), the entry passes hidden states on in any other (dist.h
 * invariant 9). */
static void shoal_cluster_group_config(shoal_cluster *cl, const shoal_plan *p,
                                       const shoal_plan_member *mem, size_t n, size_t me,
                                       shoal_dist_stage_config *c)
{
	bool last = c->has_head;
	c->tp_n = (uint32_t)n;
	c->tp_me = (uint32_t)me;
	for (size_t j = 0; j < n; j++) {
		c->tp_w[j] = mem[j].weight;
		memcpy(c->tp_peer[j], shoal_plan_peer_at(p, mem[j].peer)->id.b, 16);
	}
	c->has_head = last && mem[me].peer == shoal_plan_head_peer(p);
	c->tp_out = last ? c->has_head : me == 0;
	c->tp_head = last;
	for (size_t j = 0; last && j < n; j++)
		if (mem[j].peer == shoal_plan_head_peer(p))
			c->tp_root = (uint32_t)j;
	c->tp_relay = shoal_cluster__link;
	c->tp_relay_ctx = &cl->lctx_stage;
	c->tp_send = shoal_cluster__link;
	c->tp_send_ctx = &cl->lctx_tensor;
	c->tp_recv = shoal_cluster__tensor_in;
	c->tp_recv_ctx = cl;
	c->tp_spin_us = SHOAL_CLUSTER_TP_SPIN_US;
	const char *env = getenv("SHOAL_TP_SPIN_US"); /* for tests/bench/tp_bench.sh */
	if (env && *env)
		c->tp_spin_us = (uint32_t)strtoul(env, NULL, 10);
}

/* With a weights cache: whether tensor t of the model (the cache's file) is
 * complete and verified there (the engine refuses one that is not). */
static bool shoal_cluster__tensor_held(void *ctx, const shoal_gguf_tensor *t)
{
	shoal_cluster *cl = ctx;
	const shoal_gguf *g = cl->model->gguf;
	const shoal_gguf_tensor *base = shoal_gguf_tensor_at(g, 0);
	size_t n = shoal_gguf_n_tensors(g);
	if (!base || t < base || t >= base + n)
		return false;
	return shoal_wcache_has(cl->wc, (size_t)(t - base));
}

/* What a stage and an expert server of assignment a share. */
static void shoal_cluster_stage_common(shoal_cluster *cl, const shoal_cluster_assign *a,
                                       shoal_dist_stage_config *c)
{
	if (cl->wc) {
		c->tensor_held = shoal_cluster__tensor_held;
		c->tensor_held_ctx = cl;
	}
	memcpy(c->self, cl->cfg.self, 16);
	memcpy(c->digest, a->digest, 32);
	c->epoch = a->epoch;
	c->n_threads = cl->cfg.threads ? cl->cfg.threads : 1;
	c->n_ctx = cl->pol.ctx;
	c->max_sessions = a->sessions;
	c->max_rows = SHOAL_CLUSTER_MAX_ROWS;
	c->timeout_ms = (int)SHOAL_CLUSTER_SILENCE_MS / 3;
}

static shoal_err shoal_cluster_build_assign(shoal_cluster *cl, shoal_cluster_assign **out,
                                            char *why, size_t why_len)
{
	const shoal_plan *p = cl->plan;
	const shoal_hparams *hp = &cl->model->hp;
	shoal_err e = SHOAL_OK;
	uint8_t *mask = NULL, *peer = NULL, *xmask = NULL;
	shoal_cluster_assign *a = calloc(1, sizeof *a);
	if (!a)
		return SHOAL_ERR_NOMEM;
	memcpy(a->digest, shoal_plan_digest(p), 32);
	a->epoch = shoal_plan_epoch(p);
	a->sessions = cl->plan_sessions;
	size_t ns = shoal_plan_n_stages(p);
	memcpy(a->first, shoal_plan_peer_at(p, shoal_plan_stage_at(p, 0)->peer)->id.b, 16);
	long self = -1;
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!memcmp(shoal_plan_peer_at(p, i)->id.b, cl->cfg.self, 16))
			self = (long)i;
	if (self < 0) {
		*out = a; /* not in the plan: an owner only */
		return SHOAL_OK;
	}
	long si = -1;
	shoal_plan_member mem[SHOAL_DIST_TP_MAX];
	size_t n_mem = 0, me = 0;
	for (size_t s = 0; s < ns; s++) {
		shoal_plan_member sm[SHOAL_DIST_TP_MAX];
		size_t nm = shoal_plan_stage_members(p, s, sm, SHOAL_DIST_TP_MAX);
		if (nm > SHOAL_DIST_TP_MAX) {
			e = shoal_why(why, why_len, SHOAL_ERR_RANGE,
			              "a tensor group of %zu peers (at most %u)", nm,
			              SHOAL_DIST_TP_MAX);
			goto fail;
		}
		for (size_t j = 0; j < nm; j++)
			if (sm[j].peer == (uint32_t)self) {
				si = (long)s;
				n_mem = nm;
				me = j;
				memcpy(mem, sm, nm * sizeof *sm);
			}
		if (!nm && shoal_plan_stage_at(p, s)->peer == (uint32_t)self)
			si = (long)s;
	}
	/* Experts: who holds each, when the model has them. */
	bool moe = hp->n_expert > 0;
	bool any_x = false;
	size_t ne = (size_t)hp->n_layer * hp->n_expert;
	if (moe) {
		mask = calloc(ne ? ne : 1, 1);
		xmask = calloc(ne ? ne : 1, 1);
		peer = calloc(ne ? ne : 1, 16);
		if (!mask || !xmask || !peer) {
			e = SHOAL_ERR_NOMEM;
			goto fail;
		}
		for (uint32_t l = 0; l < hp->n_layer; l++) {
			uint32_t nx = shoal_plan_layer_n_expert(p, l);
			for (uint32_t x = 0; x < nx && x < hp->n_expert; x++) {
				uint32_t own[SHOAL_PLAN_MAX_OWNERS];
				size_t no = shoal_plan_expert_owners(p, l, x, own);
				size_t k = (size_t)l * hp->n_expert + x;
				bool mine = false;
				for (size_t j = 0; j < no; j++)
					mine |= own[j] == (uint32_t)self;
				if (mine)
					mask[k] = 1;
				else if (no)
					memcpy(peer + k * 16, shoal_plan_peer_at(p, own[0])->id.b,
					       16);
			}
		}
	}
	if (si >= 0) {
		const shoal_plan_stage *st = shoal_plan_stage_at(p, (size_t)si);
		shoal_dist_stage_config sc;
		memset(&sc, 0, sizeof sc);
		sc.layer_begin = st->first_layer;
		sc.layer_end = st->end_layer;
		sc.has_embd = si == 0;
		sc.has_head = (size_t)si == ns - 1;
		if (moe) {
			/* the stage's own layers; other layers' experts go to the
			 * expert server below */
			for (uint32_t l = 0; l < hp->n_layer; l++)
				for (uint32_t x = 0; x < hp->n_expert; x++) {
					size_t k = (size_t)l * hp->n_expert + x;
					if (mask[k] && (l < sc.layer_begin || l >= sc.layer_end)) {
						xmask[k] = 1;
						any_x = true;
					}
				}
			sc.expert_mask = mask;
			sc.expert_peer = peer;
		}
		if (n_mem > 1) { /* a member's experts are its share */
			sc.expert_mask = NULL;
			sc.expert_peer = NULL;
			shoal_cluster_group_config(cl, p, mem, n_mem, me, &sc);
		}
		if (!sc.has_head && (size_t)si + 1 < ns)
			memcpy(sc.next,
			       shoal_plan_peer_at(p, shoal_plan_stage_at(p, (size_t)si + 1)->peer)
			           ->id.b,
			       16);
		shoal_cluster_stage_common(cl, a, &sc);
		sc.link = shoal_cluster__link;
		sc.link_ctx = sc.has_head ? &cl->lctx_owner : &cl->lctx_stage;
		sc.expert_link = shoal_cluster__link;
		sc.expert_link_ctx = &cl->lctx_experts;
		sc.owner_link = shoal_cluster__link;
		sc.owner_link_ctx = &cl->lctx_owner;
		if ((e = shoal_dist_stage_new(cl->model, &sc, &a->stage, why, why_len)) != SHOAL_OK)
			goto fail;
		a->l0 = sc.layer_begin;
		a->l1 = sc.layer_end;
	} else if (moe) {
		for (size_t k = 0; k < ne; k++)
			if (mask[k])
				xmask[k] = 1, any_x = true;
	}
	if (any_x) {
		shoal_dist_stage_config xc;
		memset(&xc, 0, sizeof xc);
		xc.expert_mask = xmask;
		xc.expert_peer = peer;
		shoal_cluster_stage_common(cl, a, &xc);
		xc.link = shoal_cluster__no_link; /* it only answers, on the request's link */
		if ((e = shoal_dist_stage_new(cl->model, &xc, &a->experts, why, why_len)) !=
		    SHOAL_OK)
			goto fail;
	}
	free(mask);
	free(xmask);
	free(peer);
	*out = a;
	return SHOAL_OK;
fail:
	free(mask);
	free(xmask);
	free(peer);
	shoal_cluster__free_assign(a);
	return e;
}

/* ------------------------------------------------------------------- status */

static json_t *shoal_cluster_idstr(const uint8_t id[16])
{
	char hex[33];
	shoal_hex_encode(id, 16, hex);
	return json_string(hex);
}

static json_t *shoal_cluster_stage_met_json(const shoal_dist_stage_metrics *m)
{
	json_t *o = json_pack("{sI sI sI sI sI sI sI sI sI sI sI}", "runs", (json_int_t)m->runs,
	                 "run_ns", (json_int_t)m->run_ns,
	                 "batched_runs", (json_int_t)m->batched_runs, "rows", (json_int_t)m->rows,
	                 "hidden_sent", (json_int_t)m->hidden_sent, "tokens_sent",
	                 (json_int_t)m->tokens_sent, "expert_reqs", (json_int_t)m->expert_reqs,
	                 "expert_served", (json_int_t)m->expert_served, "expert_timeouts",
	                 (json_int_t)m->expert_timeouts, "dropped", (json_int_t)m->dropped,
	                 "session_errors", (json_int_t)m->session_errors);
	if (o && m->gathers) /* a tensor group's member */
		json_object_update_new(
		    o, json_pack("{sI sI sI sI sI sI sI sI sI}", "gathers", (json_int_t)m->gathers,
		                 "gather_sent", (json_int_t)m->gather_sent, "gather_recv",
		                 (json_int_t)m->gather_recv, "gather_frames_sent",
		                 (json_int_t)m->gather_frames_sent, "gather_frames_recv",
		                 (json_int_t)m->gather_frames_recv, "gather_bytes",
		                 (json_int_t)m->gather_bytes, "gather_wait_ns",
		                 (json_int_t)m->gather_wait_ns, "gather_blocked",
		                 (json_int_t)m->gather_blocked, "relayed", (json_int_t)m->relayed));
	if (o && m->head_gathers) /* a member of a split head */
		json_object_update_new(o, json_pack("{sI sI sI}", "head_gathers",
		                                    (json_int_t)m->head_gathers, "head_sent",
		                                    (json_int_t)m->head_sent, "head_recv",
		                                    (json_int_t)m->head_recv));
	return o;
}

/* "data": what this peer's stage, expert server and owner did under the
 * current assignment (null where there is none), as their threads last
 * published it. */
static json_t *shoal_cluster_data_json(shoal_cluster *cl)
{
	pthread_mutex_lock(&cl->mu);
	shoal_dist_stage_metrics st = cl->met_stage, ex = cl->met_experts;
	shoal_dist_owner_metrics ow = cl->met_owner;
	bool hs = cl->have_stage, hx = cl->have_experts;
	pthread_mutex_unlock(&cl->mu);
	json_t *d = json_object();
	json_object_set_new(d, "stage", hs ? shoal_cluster_stage_met_json(&st) : json_null());
	json_object_set_new(d, "experts", hx ? shoal_cluster_stage_met_json(&ex) : json_null());
	json_object_set_new(d, "owner",
	                    json_pack("{sI sI sI sI sI}", "tokens", (json_int_t)ow.tokens,
	                              "token_frames", (json_int_t)ow.token_frames, "dropped",
	                              (json_int_t)ow.dropped, "steps", (json_int_t)ow.steps,
	                              "step_ns", (json_int_t)ow.step_ns));
	return d;
}

json_t *shoal_cluster_status_json(shoal_cluster *cl)
{
	json_t *o = cl->plan ? shoal_plan_to_json(cl->plan) : json_object();
	if (!o)
		return NULL;
	char hex[65];
	shoal_model_id_hex(cl->model_id, hex);
	json_object_set_new(o, "model_id", json_string(hex));
	json_object_set_new(o, "servable", json_boolean(cl->servable));
	/* the planning policy, which every peer must share */
	json_object_set_new(o, "policy",
	                    json_pack("{sI sI sb sb sI}", "ctx", (json_int_t)cl->pol.ctx, "sessions",
	                              (json_int_t)cl->cfg.sessions, "spread_experts",
	                              cl->pol.spread_experts, "tensor_groups",
	                              cl->pol.tensor_groups, "link_us",
	                              (json_int_t)(cl->cfg.link_us ? cl->cfg.link_us
	                                                           : SHOAL_CLUSTER_LINK_US)));
	/* the measured links the plan was made with (the rest at link_us) */
	json_t *pl = json_array();
	for (size_t i = 0; i < cl->n_plan_links; i++)
		json_array_append_new(
		    pl, json_pack("{so so sI sI}", "a", shoal_cluster_idstr(cl->plan_links[i].a.b),
		                     "b", shoal_cluster_idstr(cl->plan_links[i].b.b), "latency_us",
		                     (json_int_t)(cl->plan_links[i].latency_ns / 1000u), "bw_mb_s",
		                     (json_int_t)(cl->plan_links[i].bw / 1000000u)));
	json_object_set_new(o, "planned_links", pl);
	if (!cl->plan) {
		json_object_set_new(o, "digest", json_null());
		json_object_set_new(o, "stages", json_array());
		json_object_set_new(o, "why", json_string(cl->plan_why));
	} else if (!cl->servable) {
		pthread_mutex_lock(&cl->mu);
		json_object_set_new(o, "why",
		                    json_string(cl->ready_why[0]    ? cl->ready_why
		                                : cl->shared_why[0] ? cl->shared_why
		                                                    : "waiting for peers to be ready"));
		pthread_mutex_unlock(&cl->mu);
	}
	json_t *ready = json_array(), *not_ready = json_array();
	if (cl->plan)
		for (size_t i = 0; i < shoal_plan_n_peers(cl->plan); i++) {
			const shoal_plan_peer *pp = shoal_plan_peer_at(cl->plan, i);
			bool r = false;
			for (size_t k = 0; k < cl->n_cand; k++)
				if (!shoal_peer_id_cmp(&cl->cand[k].id, &pp->id))
					r = cl->cand[k].ready;
			json_array_append_new(r ? ready : not_ready, shoal_cluster_idstr(pp->id.b));
		}
	json_object_set_new(o, "ready", ready);
	json_object_set_new(o, "not_ready", not_ready);
	json_t *left = json_array();
	for (size_t i = 0; i < cl->n_left; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "peer", shoal_cluster_idstr(cl->left[i].id.b));
		json_object_set_new(e, "name", json_string(cl->left[i].name));
		json_object_set_new(e, "why", json_string(cl->left[i].why));
		json_array_append_new(left, e);
	}
	json_object_set_new(o, "left_out", left);
	json_t *links = json_array();
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_link_status; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "peer", shoal_cluster_idstr(cl->link_peer[i]));
		json_object_set_new(e, "transport", json_string(cl->link_status[i]));
		json_array_append_new(links, e);
	}
	pthread_mutex_unlock(&cl->mu);
	json_object_set_new(o, "links", links);
	json_object_set_new(o, "data", shoal_cluster_data_json(cl));
	json_t *w = json_object();
	json_object_set_new(w, "source", json_string(cl->wc ? "cache" : "file"));
	json_object_set_new(w, "cache_hit_bytes", json_integer((json_int_t)cl->cache_hit_bytes));
	shoal_weights_progress pr;
	if (cl->wf)
		shoal_weights_get_progress(cl->wf, &pr);
	json_object_set_new(w, "fetch", cl->wf ? shoal_weights_progress_json(&pr) : json_null());
	json_object_set_new(o, "weights", w);
	return o;
}

/* ------------------------------------------------------- requests and replies */

/* cl->msg (encoded by the caller) to the client. */
static void shoal_cluster_send(shoal_cluster *cl, const shoal_ctl_route *to)
{
	if (cl->cfg.reply)
		cl->cfg.reply(cl->cfg.ud, to, cl->msg.data, cl->msg.len);
}

/* The end of run seq: err SHOAL_OK with the detokenizer's tail, or an error
 * with its reason (retry: the same request may succeed if sent again). */
static void shoal_cluster_end_n(shoal_cluster *cl, const shoal_ctl_route *to, uint64_t seq,
                                shoal_err err, bool retry, const char *why, const char *tail,
                                size_t tail_len, uint32_t tokens)
{
	shoal_run_end end = {.err = err, .retry = err && retry, .tokens = tokens};
	if (err) {
		end.why = why && why[0] ? why : shoal_strerror(err);
		end.why_len = strnlen(end.why, SHOAL_RUN_MAX_WHY);
		end.text = "";
	} else {
		end.text = tail ? tail : "";
		end.text_len = tail ? (tail_len < SHOAL_RUN_MAX_TEXT ? tail_len : SHOAL_RUN_MAX_TEXT) : 0;
	}
	if (shoal_runmsg_encode_end(seq, &end, &cl->msg) == SHOAL_OK)
		shoal_cluster_send(cl, to);
	else
		SHOAL_LOG_W("cluster", "cannot encode the end of run %llu", (unsigned long long)seq);
}

/* The end of a run that sent no tokens (refused before it started). */
static void shoal_cluster_end(shoal_cluster *cl, const shoal_ctl_route *to, uint64_t seq,
                              shoal_err err, bool retry, const char *why, const char *tail,
                              size_t tail_len)
{
	shoal_cluster_end_n(cl, to, seq, err, retry, why, tail, tail_len, 0);
}

/* Queue a run of (*ids)[n_ids] (taken: *ids is NULL after) for max tokens
 * n (> 0), answering to the client `from` (seq) or, with sink, to it.
 * *slot names it. BUSY when every slot is taken. Any thread. */
static shoal_err shoal_cluster_queue(shoal_cluster *cl, int32_t **ids, size_t n_ids, uint32_t n,
                                     uint32_t k, bool no_logprob,
                                     const shoal_sampler_params *sp,
                                     const shoal_ctl_route *from, uint64_t seq,
                                     const shoal_api_sink *sink, uint32_t *slot_out, char *why,
                                     size_t why_len)
{
	uint32_t max_tokens = n;
	if (max_tokens > cl->pol.ctx - n_ids)
		max_tokens = cl->pol.ctx - (uint32_t)n_ids;
	/* room for the tokens it will stream: the history a replay feeds */
	int32_t *hist = realloc(*ids, (n_ids + max_tokens) * sizeof **ids);
	if (!hist)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	*ids = hist;
	pthread_mutex_lock(&cl->mu);
	size_t slot = SHOAL_CLUSTER_MAX_RUNS;
	for (size_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS && slot == SHOAL_CLUSTER_MAX_RUNS; i++)
		if (cl->runs[i].state == SHOAL_CLUSTER_RUN_FREE)
			slot = i;
	if (slot < SHOAL_CLUSTER_MAX_RUNS) {
		shoal_cluster_run *r = &cl->runs[slot];
		uint32_t gen = r->gen + 1;
		free(r->prompt);
		memset(r, 0, sizeof *r);
		r->gen = gen;
		if (from) {
			r->route = *from;
			r->route.endpoint = NULL;
		} else {
			r->route.fd = -1;
			r->sink = *sink;
			r->has_sink = true;
		}
		r->seq = seq;
		r->prompt = *ids;
		*ids = NULL;
		r->n_prompt = (uint32_t)n_ids;
		r->max_tokens = max_tokens;
		r->logprobs = k;
		r->no_logprob = no_logprob;
		r->sp = *sp;
		r->deadline_us = shoal_clock_now_us() + SHOAL_CLUSTER_WAIT_MS * 1000u;
		shoal_detok_init(&r->dt, cl->tok, false);
		r->dt.first = false;
		r->n_sent = 0;
		r->state = SHOAL_CLUSTER_RUN_QUEUED;
		*slot_out = (uint32_t)slot | gen << 8;
	}
	pthread_mutex_unlock(&cl->mu);
	if (slot == SHOAL_CLUSTER_MAX_RUNS)
		return shoal_why(why, why_len, SHOAL_ERR_BUSY,
		                 "busy: this peer holds %u requests (running and queued)",
		                 SHOAL_CLUSTER_MAX_RUNS);
	shoal_cluster__wake(cl);
	return SHOAL_OK;
}

void shoal_cluster_run_request(shoal_cluster *cl, const shoal_ctl_route *from, const uint8_t *buf,
                               size_t len)
{
	char why[256] = "";
	int32_t *ids = NULL;
	size_t n_ids = 0;
	char *prompt = NULL, *system = NULL;
	shoal_runmsg rm;
	shoal_err e = shoal_runmsg_decode(buf, len, &rm, why, sizeof why);
	if (e == SHOAL_OK && rm.type != SHOAL_CTLMSG_RUN_REQ)
		e = shoal_why(why, sizeof why, SHOAL_ERR_PROTO, "a run reply sent to a peer");
	uint64_t seq = rm.seq;
	if (e) {
		char w[300];
		snprintf(w, sizeof w, "bad request: %s", why);
		shoal_cluster_end(cl, from, seq, e, false, w, NULL, 0);
		return;
	}
	const shoal_run_req *q = &rm.req;
	prompt = strndup(q->prompt, q->prompt_len);
	system = q->system ? strndup(q->system, q->system_len) : NULL;
	if (!prompt || (q->system && !system)) {
		shoal_cluster_end(cl, from, seq, SHOAL_ERR_NOMEM, false, "out of memory", NULL, 0);
		goto out;
	}
	shoal_sampler_params sp = shoal_sampler_defaults();
	uint32_t n = q->max_tokens, k = q->logprobs;
	sp.temp = q->temp;
	sp.top_k = (int32_t)q->top_k;
	sp.top_p = q->top_p;
	sp.min_p = q->min_p;
	sp.repeat_penalty = q->repeat_penalty;
	sp.seed = q->seed;
	/* the decoder checked the limits; the sampler's own ranges here */
	if (sp.top_k < 0 || !(sp.top_p >= 0 && sp.top_p <= 1) || !(sp.min_p >= 0 && sp.min_p <= 1)) {
		shoal_cluster_end(cl, from, seq, SHOAL_ERR_RANGE, false,
		                  "bad request: a sampler parameter is out of range", NULL, 0);
		goto out;
	}
	bool chat = q->chat;
	why[0] = '\0';
	e = shoal_prompt_ids(cl->model, cl->tok, prompt, chat, system, &ids, &n_ids, why,
	                     sizeof why);
	if (e != SHOAL_OK) {
		char w[300];
		snprintf(w, sizeof w, "the prompt: %s", why[0] ? why : shoal_strerror(e));
		shoal_cluster_end(cl, from, seq, e, false, w, NULL, 0);
		goto out;
	}
	if (n_ids == 0) {
		shoal_cluster_end(cl, from, seq, SHOAL_ERR_INVAL, false, "the prompt has no tokens",
		                  NULL, 0);
		goto out;
	}
	if (n_ids >= cl->pol.ctx) {
		snprintf(why, sizeof why, "the prompt has %zu tokens, the context %u", n_ids,
		         cl->pol.ctx);
		shoal_cluster_end(cl, from, seq, SHOAL_ERR_RANGE, false, why, NULL, 0);
		goto out;
	}
	if (n == 0) {
		shoal_cluster_end(cl, from, seq, SHOAL_OK, false, NULL, "", 0);
		goto out;
	}
	uint32_t slot;
	/* without --logprobs the client shows no logprob: the last stage
	 * skips the log-sum-exp over the vocabulary (~15 % of a small
	 * model's token) */
	e = shoal_cluster_queue(cl, &ids, n_ids, (uint32_t)n, (uint32_t)k, k == 0, &sp, from, seq,
	                        NULL, &slot, why, sizeof why);
	if (e)
		shoal_cluster_end(cl, from, seq, e, e == SHOAL_ERR_BUSY, why, NULL, 0);
out:
	free(ids);
	free(prompt);
	free(system);
}

void shoal_cluster_client_gone(shoal_cluster *cl, int fd)
{
	uint32_t n = 0;
	if (fd < 0)
		return;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++)
		if (cl->runs[i].state != SHOAL_CLUSTER_RUN_FREE && cl->runs[i].route.fd == fd &&
		    !cl->runs[i].cancel) {
			cl->runs[i].cancel = true;
			n++;
		}
	pthread_mutex_unlock(&cl->mu);
	if (n) {
		SHOAL_LOG_I("cluster", "a client went away: %u run(s) end", n);
		shoal_cluster__wake(cl);
	}
}

int shoal_cluster_event_fd(const shoal_cluster *cl)
{
	return cl->evfd[0];
}

void shoal_cluster_drain(shoal_cluster *cl)
{
	char drain[64];
	while (read(cl->evfd[0], drain, sizeof drain) > 0)
		;
	char text[SHOAL_RUN_MAX_TEXT];
	shoal_run_token tok;
	for (;;) {
		shoal_cluster_event ev;
		pthread_mutex_lock(&cl->mu);
		if (!cl->ev_n) {
			pthread_mutex_unlock(&cl->mu);
			break;
		}
		ev = cl->ev[cl->ev_head];
		cl->ev_head = (cl->ev_head + 1) % SHOAL_CLUSTER_EVENTS;
		cl->ev_n--;
		pthread_cond_broadcast(&cl->cv);
		if (ev.end == SHOAL_CLUSTER_EV_PEER_GONE) {
			pthread_mutex_unlock(&cl->mu);
			if (cl->cfg.peer_gone)
				cl->cfg.peer_gone(cl->cfg.ud, ev.peer, ev.inc, ev.why);
			continue;
		}
		shoal_cluster_run *r = &cl->runs[ev.run];
		shoal_ctl_route to = r->route;
		uint64_t seq = r->seq;
		pthread_mutex_unlock(&cl->mu);
		if (ev.end == SHOAL_CLUSTER_EV_TOKEN) {
			/* into preallocated buffers: nothing allocated per token */
			tok.id = ev.id;
			tok.logprob = ev.lp;
			tok.text = text;
			tok.text_len = shoal_detok_push(&r->dt, ev.id, text, sizeof text);
			tok.n_top = ev.n_top;
			memcpy(tok.top_ids, ev.top_ids, ev.n_top * sizeof *tok.top_ids);
			memcpy(tok.top_lps, ev.top_lps, ev.n_top * sizeof *tok.top_lps);
			if (r->has_sink)
				r->sink.on_token(r->sink.ctx, tok.id, text, tok.text_len, tok.logprob,
				                 tok.n_top, tok.top_ids, tok.top_lps);
			else if (shoal_runmsg_encode_token(seq, &tok, &cl->msg) == SHOAL_OK)
				shoal_cluster_send(cl, &to);
			r->n_sent++;
		} else {
			size_t tl = shoal_detok_flush(&r->dt, text, sizeof text);
			if (r->has_sink)
				r->sink.on_end(r->sink.ctx, ev.err, ev.why, text, tl);
			else
				shoal_cluster_end_n(cl, &to, seq, ev.err, ev.retry, ev.why, text, tl,
				                    r->n_sent);
			pthread_mutex_lock(&cl->mu);
			free(r->prompt);
			r->prompt = NULL;
			r->state = SHOAL_CLUSTER_RUN_FREE;
			pthread_mutex_unlock(&cl->mu);
		}
	}
}

/* ------------------------------------------------------------- the HTTP API */

shoal_err shoal_cluster_prompt(shoal_cluster *cl, const shoal_chat_msg *msgs, size_t n,
                               const char *text, int32_t **ids, size_t *n_ids, char *why,
                               size_t why_len)
{
	shoal_err e = msgs ? shoal_prompt_chat_ids(cl->model, cl->tok, msgs, n, ids, n_ids, why,
	                                           why_len)
	                   : shoal_prompt_ids(cl->model, cl->tok, text ? text : "", false, NULL, ids,
	                                      n_ids, why, why_len);
	if (e)
		return e;
	if (!*n_ids || *n_ids >= cl->pol.ctx) {
		e = shoal_why(why, why_len, SHOAL_ERR_RANGE, "%zu tokens; the context holds %u",
		              *n_ids, cl->pol.ctx);
		free(*ids);
		*ids = NULL;
	}
	return e;
}

shoal_err shoal_cluster_submit(shoal_cluster *cl, const int32_t *ids, size_t n_ids,
                               const shoal_api_gen *g, const shoal_api_sink *sink,
                               uint32_t *handle, char *why, size_t why_len)
{
	shoal_sampler_params sp = shoal_sampler_defaults();
	sp.temp = g->temp;
	sp.top_p = g->top_p;
	sp.seed = g->seed;
	if (!n_ids || n_ids >= cl->pol.ctx)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%zu prompt tokens; the context holds %u",
		                 n_ids, cl->pol.ctx);
	int32_t *copy = malloc(n_ids * sizeof *copy);
	if (!copy)
		return SHOAL_ERR_NOMEM;
	memcpy(copy, ids, n_ids * sizeof *copy);
	shoal_err e = shoal_cluster_queue(cl, &copy, n_ids, g->max_tokens ? g->max_tokens : 1,
	                                  g->logprobs, !g->logprob, &sp, NULL, 0, sink, handle, why,
	                                  why_len);
	free(copy);
	return e;
}

void shoal_cluster_cancel(shoal_cluster *cl, uint32_t handle)
{
	uint32_t slot = handle & 0xff;
	if (slot >= SHOAL_CLUSTER_MAX_RUNS)
		return;
	pthread_mutex_lock(&cl->mu);
	shoal_cluster_run *r = &cl->runs[slot];
	bool hit = r->state != SHOAL_CLUSTER_RUN_FREE && r->has_sink && r->gen == handle >> 8;
	if (hit)
		r->cancel = true;
	pthread_mutex_unlock(&cl->mu);
	if (hit)
		shoal_cluster__wake(cl);
}

size_t shoal_cluster_token_text(shoal_cluster *cl, int32_t id, char *buf, size_t cap)
{
	size_t n = shoal_tokenizer_piece(cl->tok, id, false, buf, cap);
	return n < cap ? n : cap;
}

void shoal_cluster_gauges(shoal_cluster *cl, shoal_api_gauges *g)
{
	memset(g, 0, sizeof *g);
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++) {
		g->queued += cl->runs[i].state == SHOAL_CLUSTER_RUN_QUEUED;
		g->running += cl->runs[i].state == SHOAL_CLUSTER_RUN_STARTED;
	}
	g->stage_runs = cl->met_stage.runs;
	g->stage_batched_runs = cl->met_stage.batched_runs;
	g->stage_rows = cl->met_stage.rows;
	g->hidden_frames = cl->met_stage.hidden_sent;
	g->hidden_bytes = cl->met_stage.hidden_bytes;
	g->token_frames = cl->met_stage.tokens_sent;
	g->stage_last_run_ns = cl->met_stage.last_run_ns;
	pthread_mutex_unlock(&cl->mu);
}
