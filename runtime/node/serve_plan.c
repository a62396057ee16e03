/*
 * runtime/node/serve_plan.c: planning from the view (shoal_serve_update):
 * the candidates and a signature of every planning input; on a change, a
 * plan from the previous one where the peers can agree on it, else from
 * scratch; on a new digest, our part of it (serve_part.c). Node thread.
 *
 * Divisions: left out; the previous plan; the update's steps 1-3 (the
 * scheduler's inputs and calls are serve_schedule.c's, step 4,
 * servability, serve_ready.c's).
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"
#include "net/linkview.h"

/* ------------------------------------------------------------ left out */

static void serve_left(shoal_serve *cl, const shoal_swim_member *m, const char *fmt,
                       const char *arg)
{
	if (cl->n_left >= SHOAL_SERVE_MAX_PEERS)
		return;
	cl->left[cl->n_left].id = m->id;
	snprintf(cl->left[cl->n_left].name, sizeof cl->left[0].name, "%s", m->record.name);
	snprintf(cl->left[cl->n_left].why, sizeof cl->left[0].why, fmt, arg);
	cl->n_left++;
}

/* ------------------------------------------------------- the previous plan */

/* Whether the previous plan may steer the scheduler: no candidate
 * announced another plan. A peer that announced nothing yet (it just
 * joined, or restarted: named by prev, it learns prev from us and takes
 * its part again, so a restart changes no plan) does not block it. Peers
 * that plan from different previous plans would never agree: one that
 * announces another plan sends everyone to the common ground, a plan from
 * scratch. Readiness for `next`, the plan computed from prev, counts too:
 * peers that already moved to it (a joiner, or all of us while it loads)
 * agree with us. */
static bool serve_prev_usable(const shoal_plan *prev, const shoal_plan *next,
                              const shoal_swim_member *const *cand, size_t nc)
{
	if (!prev)
		return false;
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		bool ready =
		    r->ready_epoch &&
		    (!memcmp(r->ready_digest, shoal_plan_digest(prev), SHOAL_DIGEST_BYTES) ||
		     (next &&
		      !memcmp(r->ready_digest, shoal_plan_digest(next), SHOAL_DIGEST_BYTES)));
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
static void serve_learn_prev(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc)
{
	const uint8_t *d = NULL;
	size_t others = 0;
	uint64_t epoch = 0;
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		if (!memcmp(r->id.b, cl->cfg.self, SHOAL_PEER_ID_LEN))
			continue;
		if (!r->ready_epoch || (d && memcmp(d, r->ready_digest, SHOAL_DIGEST_BYTES)))
			return;
		d = r->ready_digest;
		epoch = r->ready_epoch;
		others++;
	}
	if (!d || (!memcmp(d, cl->learn_tried, SHOAL_DIGEST_BYTES) && cl->learn_tried_n == nc) ||
	    (cl->prev && !memcmp(d, shoal_plan_digest(cl->prev), SHOAL_DIGEST_BYTES)))
		return;
	/* tried again when the view grows (a joiner sees its seed first) */
	memcpy(cl->learn_tried, d, SHOAL_DIGEST_BYTES);
	cl->learn_tried_n = nc;
	shoal_plan *p = NULL;
	char why[SHOAL_WHY_LEN], dh[65];
	/* their plan was numbered from the floor they saw then; it is over
	 * their view without us (we join), or with us (we restarted: the
	 * plan names us) */
	uint64_t floor = cl->pol.epoch_floor;
	cl->pol.epoch_floor = epoch - 1;
	shoal_err e = SHOAL_ERR_STATE;
	for (int with_self = 0; with_self < 2 && e != SHOAL_OK; with_self++) {
		e = serve__plan_on(cl, cand, nc, with_self ? NULL : cl->cfg.self, NULL, &p, NULL,
		                   why, sizeof why);
		if (e == SHOAL_OK && memcmp(shoal_plan_digest(p), d, SHOAL_DIGEST_BYTES)) {
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
typedef struct shoal_serve_other {
	uint8_t id[SHOAL_MODEL_ID_BYTES];
	size_t n;
	char first[SHOAL_RECORD_NAME_MAX]; /* the first such peer's name */
} shoal_serve_other;

static void serve_other_add(shoal_serve_other *o, size_t *no, const shoal_swim_member *m)
{
	size_t i = 0;
	while (i < *no && memcmp(o[i].id, m->record.models[0].digest, SHOAL_MODEL_ID_BYTES))
		i++;
	if (i == *no) {
		if (*no >= SHOAL_SERVE_MAX_PEERS)
			return;
		memcpy(o[i].id, m->record.models[0].digest, SHOAL_MODEL_ID_BYTES);
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
static bool serve_outvoted(shoal_serve *cl, const shoal_serve_other *o, size_t no, size_t nc,
                           char *why, size_t why_len)
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
static bool serve_plan_peer_died(const shoal_serve *cl, const shoal_swim_member *v, size_t n)
{
	if (!cl->plan)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (v[i].state != SHOAL_SWIM_STATE_DEAD)
			continue;
		for (size_t k = 0; k < shoal_plan_n_peers(cl->plan); k++)
			if (!memcmp(shoal_plan_peer_at(cl->plan, k)->id.b, v[i].id.b,
			            SHOAL_PEER_ID_LEN))
				return true;
	}
	return false;
}

/* ------------------------------------------------------------- the update */

/* Step 1 of shoal_serve_update: the candidates (alive, compatible, serving
 * our model id) into cand[] (their count returned), the peers left out
 * (cl->left), whether peers of another model outvote ours (*outvoted, and
 * why), and a signature of every planning input, so that step 2 re-plans
 * only when one changed. */
/* Step 1b: the candidates all[na] less those that SHOAL_SERVE_DSUSPECT_VOTES
 * others name data suspects (serve_probe.c) into cand (their count
 * returned); each one left out goes into cl->left and the signature. */
static size_t serve_drop_dsuspects(shoal_serve *cl, const shoal_swim_member *const *all, size_t na,
                                   const shoal_swim_member **cand, crypto_generichash_state *hs)
{
	size_t nc = 0;
	bool out[SHOAL_SERVE_MAX_PEERS];
	serve__dsuspects(all, na, out);
	for (size_t i = 0; i < na; i++) {
		char names[SHOAL_WHY_LEN / 2];
		if (!out[i]) {
			cand[nc++] = all[i];
			continue;
		}
		serve__dsuspect_votes(all, na, i, NULL, names, sizeof names);
		serve_left(cl, all[i], "its data plane fails as %s probe it", names);
		crypto_generichash_update(hs, (const uint8_t *)"dsuspect", 8);
		crypto_generichash_update(hs, all[i]->id.b, SHOAL_PEER_ID_LEN);
	}
	return nc;
}

static size_t serve_candidates(shoal_serve *cl, const shoal_swim_member *v, size_t n,
                               const shoal_swim_member **all, size_t *n_all,
                               const shoal_swim_member **cand, bool *outvoted, char *left_why,
                               size_t left_len, uint8_t sig[SHOAL_DIGEST_BYTES])
{
	crypto_generichash_state hs;
	crypto_generichash_init(&hs, NULL, 0, SHOAL_DIGEST_BYTES);
	cl->n_left = 0;
	size_t nc = 0, no = 0;
	shoal_serve_other other[SHOAL_SERVE_MAX_PEERS];
	for (size_t i = 0; i < n; i++) {
		const shoal_swim_member *m = &v[i];
		char hex[65];
		if (m->state != SHOAL_SWIM_STATE_ALIVE && m->state != SHOAL_SWIM_STATE_SUSPECT)
			continue;
		if (!m->compatible) {
			serve_left(cl, m, "%s", m->why_incompatible);
			continue;
		}
		if (!m->record.serving || m->record.n_models == 0) {
			serve_left(cl, m, "%s", "serves no model (no --model)");
			continue;
		}
		if (memcmp(m->record.models[0].digest, cl->model_id, SHOAL_MODEL_ID_BYTES)) {
			shoal_model_id_hex(m->record.models[0].digest, hex);
			serve_left(cl, m, "its model id %.16s... differs from ours", hex);
			serve_other_add(other, &no, m);
			continue;
		}
		if (nc >= SHOAL_SERVE_MAX_PEERS)
			continue;
		all[nc++] = m;
	}
	*n_all = nc;
	nc = serve_drop_dsuspects(cl, all, nc, cand, &hs);
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		crypto_generichash_update(&hs, r->id.b, SHOAL_PEER_ID_LEN);
		crypto_generichash_update(&hs, (const uint8_t *)&r->mem_weights, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&r->compute_mb_s, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&r->compute_mflops, 8);
		shoal_view_peer gp; /* the GPU it plans with, as the view gets it */
		memset(&gp, 0, sizeof gp);
		serve__gpu(r, &gp);
		crypto_generichash_update(&hs, (const uint8_t *)&gp.gpu_mem, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&gp.gpu_bw, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&gp.gpu_flops, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&gp.gpu_unified, 1);
		crypto_generichash_update(&hs, (const uint8_t *)&r->spec_mtp, 4);
		crypto_generichash_update(&hs, (const uint8_t *)r->ctl_endpoint,
		                          strlen(r->ctl_endpoint));
		for (uint32_t k = 0; k < r->n_data_ep; k++)
			crypto_generichash_update(&hs, (const uint8_t *)r->data_ep[k].addr,
			                          strlen(r->data_ep[k].addr));
		/* measured links (bucketed where measured: they change when a
		 * link does, not with its jitter), where the plan uses them */
		for (uint32_t k = 0; serve__measured_links(cl) && k < r->n_links; k++) {
			const shoal_record_link *l = &r->links[k];
			crypto_generichash_update(&hs, l->peer.b, SHOAL_PEER_ID_LEN);
			crypto_generichash_update(&hs, (const uint8_t *)&l->rtt_us, 4);
			crypto_generichash_update(&hs, (const uint8_t *)&l->bw_bytes_s, 8);
		}
		for (uint32_t k = 0; serve__data_links(cl) && k < r->n_dlinks; k++) {
			const shoal_record_dlink *d = &r->dlinks[k];
			crypto_generichash_update(&hs, d->peer.b, SHOAL_PEER_ID_LEN);
			crypto_generichash_update(&hs, (const uint8_t *)&d->rtt_us, 4);
			crypto_generichash_update(&hs, (const uint8_t *)&d->bw_bytes_s, 8);
		}
	}
	/* readiness is an input too: whether the previous plan may be used
	 * depends on it (serve_prev_usable) */
	for (size_t i = 0; i < nc; i++) {
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->record.ready_epoch, 8);
		crypto_generichash_update(&hs, cand[i]->record.ready_digest, SHOAL_DIGEST_BYTES);
		/* a restart: the data thread must know the new incarnation */
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->incarnation, 8);
		crypto_generichash_update(&hs, (const uint8_t *)&cand[i]->record.served_epoch, 8);
	}
	/* new plans are numbered above every epoch served so far */
	cl->pol.epoch_floor = cl->served_epoch;
	for (size_t i = 0; i < nc; i++)
		if (cand[i]->record.served_epoch > cl->pol.epoch_floor)
			cl->pol.epoch_floor = cand[i]->record.served_epoch;
	left_why[0] = '\0';
	*outvoted = serve_outvoted(cl, other, no, nc, left_why, left_len);
	crypto_generichash_update(&hs, (const uint8_t *)left_why, strlen(left_why));
	crypto_generichash_final(&hs, sig, SHOAL_DIGEST_BYTES);
	return nc;
}

/* The data endpoints of the candidates, for the data thread (under mu):
 * loopback talks to loopback, so an endpoint whose kind matches our data
 * host's is preferred. */
static void serve_endpoints(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc)
{
	int want_lo = !strncmp(cl->cfg.data_host ? cl->cfg.data_host : "", "127.", 4);
	pthread_mutex_lock(&cl->mu);
	cl->n_eps = 0;
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		shoal_serve_ep *ep = &cl->eps[cl->n_eps];
		if (!shoal_weights_pick_ep(r, want_lo, ep->host, &ep->port))
			continue;
		memcpy(ep->id, r->id.b, SHOAL_PEER_ID_LEN);
		ep->inc = cand[i]->incarnation;
		cl->n_eps++;
	}
	cl->eps_version++;
	pthread_mutex_unlock(&cl->mu);
}

/* A new plan in the log: its stages, each with its tensor group. */
static void serve_log_plan(const shoal_plan *np, uint32_t sessions, const char *dh)
{
	SHOAL_LOG_I("cluster",
	            "plan epoch %llu digest %.16s: %zu stage(s) over %zu peer(s), "
	            "%u session(s), %.3f ms/token predicted",
	            (unsigned long long)shoal_plan_epoch(np), dh, shoal_plan_n_stages(np),
	            shoal_plan_n_peers(np), sessions, (double)shoal_plan_predicted_ns(np) / 1e6);
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
		            shoal_plan_peer_at(np, st->peer)->name, st->first_layer, st->end_layer,
		            grp);
	}
}

/* Steps 2 and 3 of shoal_serve_update: a plan from the previous one when
 * the peers can agree on it (our own last servable one, else the one
 * learned from the peers we joined), else from scratch; on a new digest,
 * our part of it. Returns 1 when the record must be republished. */
static int serve_replan(shoal_serve *cl, const shoal_swim_member *v, size_t n,
                        const shoal_swim_member *const *cand, size_t nc, bool outvoted,
                        const char *left_why)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_plan *np = NULL;
	uint32_t np_sessions = 0;
	shoal_err e = SHOAL_ERR_STATE;
	for (int attempt = 0; attempt < 2 && e != SHOAL_OK && !outvoted; attempt++) {
		if (attempt == 1)
			serve_learn_prev(cl, cand, nc);
		if (!cl->prev)
			continue;
		e = serve__plan_next(cl, cand, nc, cl->prev, &np, &np_sessions, why, sizeof why);
		if (e == SHOAL_OK && !serve_prev_usable(cl->prev, np, cand, nc)) {
			shoal_plan_free(np);
			np = NULL;
			e = SHOAL_ERR_STATE;
		}
	}
	if (outvoted)
		e = shoal_why(why, sizeof why, SHOAL_ERR_INFEASIBLE, "%s", left_why);
	else if (e != SHOAL_OK)
		e = serve__plan_next(cl, cand, nc, NULL, &np, &np_sessions, why, sizeof why);
	if (e != SHOAL_OK) {
		/* a warning only when a peer of the plan died: at start (peers
		 * still joining) and when a peer leaves, us included, it is
		 * normal */
		bool died = serve_plan_peer_died(cl, v, n);
		if (strcmp(cl->plan_why, why) || cl->plan)
			shoal_log(died ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "cluster",
			          "no plan over %zu peer(s): %s", nc,
			          why[0] ? why : shoal_strerror(e));
		if (cl->plan)
			cl->died_us = died ? shoal_clock_now_us() : 0;
		snprintf(cl->plan_why, sizeof cl->plan_why, "%s", why[0] ? why : shoal_strerror(e));
		cl->plan_err = e;
		shoal_plan_free(cl->plan);
		cl->plan = NULL;
		serve__timing_plan(cl, false);
		return 0;
	}
	if (cl->plan &&
	    !memcmp(shoal_plan_digest(np), shoal_plan_digest(cl->plan), SHOAL_DIGEST_BYTES)) {
		/* the same plan; new figures (a compute probe retaken) still
		 * change what it predicts */
		if (shoal_plan_take_times(cl->plan, np)) {
			SHOAL_LOG_D("cluster", "plan kept, predicted anew: %.3f ms/token",
			            (double)shoal_plan_predicted_ns(cl->plan) / 1e6);
			serve__timing_plan(cl, true);
		}
		shoal_plan_free(np);
		return 0;
	}
	char dh[65];
	shoal_digest_hex(shoal_plan_digest(np), dh);
	serve_log_plan(np, np_sessions, dh);
	shoal_plan_free(cl->plan);
	cl->plan = np;
	serve__timing_plan(cl, false);
	cl->plan_sessions = np_sessions;
	cl->plan_why[0] = '\0';
	/* 3. Our part: unless it is the plan whose part the data thread runs
	 * (a plan that came back after a moment without one: its stage stays,
	 * with its sessions), build it (fetched first when missing) and
	 * announce readiness for the digest. */
	bool in_force = cl->ready_epoch && cl->ready_epoch == shoal_plan_epoch(cl->plan) &&
	                !memcmp(cl->ready_digest, shoal_plan_digest(cl->plan), SHOAL_DIGEST_BYTES);
	if (in_force) {
		SHOAL_LOG_I("cluster", "plan %.16s is back: our part of it stays as it is", dh);
		cl->part_taken = true;
		pthread_mutex_lock(&cl->mu);
		memcpy(cl->shared_digest, shoal_plan_digest(cl->plan), SHOAL_DIGEST_BYTES);
		cl->shared_epoch = shoal_plan_epoch(cl->plan);
		pthread_mutex_unlock(&cl->mu);
	} else {
		cl->part_taken = false;
		cl->ready_epoch = 0;
		memset(cl->ready_digest, 0, SHOAL_DIGEST_BYTES);
		serve__take_part(cl);
	}
	cl->servable = false;
	return 1;
}

int shoal_serve_update(shoal_serve *cl, const shoal_swim_member *v, size_t n)
{
	/* 1. Candidates: alive, compatible, serving our model id. */
	const shoal_swim_member *cand[SHOAL_SERVE_MAX_PEERS] = {0};
	const shoal_swim_member *all[SHOAL_SERVE_MAX_PEERS] = {0};
	char left_why[SHOAL_WHY_LEN];
	uint8_t sig[SHOAL_DIGEST_BYTES];
	bool outvoted;
	size_t na = 0;
	size_t nc =
	    serve_candidates(cl, v, n, all, &na, cand, &outvoted, left_why, sizeof left_why, sig);
	/* our data suspects changed (the prober): publish them */
	pthread_mutex_lock(&cl->mu);
	int republish = cl->dsus_version != cl->dsus_published;
	pthread_mutex_unlock(&cl->mu);
	/* 2. Re-plan only when the planning inputs changed. */
	if (!cl->have_sig || memcmp(sig, cl->view_sig, SHOAL_DIGEST_BYTES)) {
		memcpy(cl->view_sig, sig, SHOAL_DIGEST_BYTES);
		cl->have_sig = true;
		serve_endpoints(cl, all, na); /* those left out are still probed */
		republish |= serve_replan(cl, v, n, cand, nc, outvoted, left_why);
	}
	/* a fetch that ended lets us take our part now */
	republish |= serve__take_part(cl);
	/* 4. Servable when every peer of the plan announced its digest. */
	republish |= serve__judge(cl, cand, nc);
	return republish;
}
