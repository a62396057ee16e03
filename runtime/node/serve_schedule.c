/*
 * runtime/node/serve_schedule.c: the scheduler's inputs and calls for
 * serve_plan.c: a view of the candidates' records (bucketed speeds, their
 * GPU, the links the policy takes), a plan on it, and the chosen plan's
 * prediction on the data plane's timed links. Node thread.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/linkview.h"

/* ------------------------------------------------- the scheduler's inputs */

/* A measured speed as the plan sees it: the quarter-octave bucket's value
 * (scheduler/view.h). Probes run once at start, so the bucket needs no
 * history; a zero (failed probe) counts as 1 GB/s or 1 GFLOP/s. */
static uint64_t serve_speed(uint64_t per_s_millions)
{
	uint64_t raw = per_s_millions ? per_s_millions * 1000000u : 1000000000u;
	return shoal_bucket_geo_value(shoal_bucket_geo(raw, SHOAL_BUCKET_NONE));
}

/* A GPU whose multiply rate was not measured is planned as bandwidth-bound
 * up to 64 FLOP per byte read: below the ridge point of current GPUs
 * (~100-300 FLOP/byte at FP16), above what decode asks (~2-4 FLOP per
 * byte of quantized weights), so it never binds decode and stays modest
 * for prefill. */
#define SERVE_GPU_FLOP_PER_BYTE 64u

/* The GPU a peer's plan may use (scheduler/view.h): of its record's GPU
 * devices with a measured bandwidth, the one with the most memory (ties:
 * the first listed); none leaves p's GPU empty. A software device of a
 * GPU backend (Mesa's lavapipe) counts as one: a record lists it only when
 * its node was started with that backend named. One a peer for now: the
 * scheduler splits a stage between one GPU and the CPU. Returns its index
 * in r->devices, or -1. */
int serve__gpu(const shoal_record *r, shoal_view_peer *p)
{
	int best = -1;
	for (uint32_t i = 0; i < r->n_devices && i < SHOAL_RECORD_MAX_DEVICES; i++) {
		const shoal_record_device *d = &r->devices[i];
		bool gpu = d->kind == SHOAL_RECORD_DEVICE_GPU ||
		           (d->software && strcmp(d->backend, "cpu") != 0);
		if (!gpu || !d->read_mb_s || !d->mem_bytes)
			continue;
		if (best < 0 || d->mem_bytes > r->devices[best].mem_bytes)
			best = (int)i;
	}
	if (best < 0)
		return -1;
	const shoal_record_device *d = &r->devices[best];
	p->gpu_mem = d->mem_bytes;
	p->gpu_bw = serve_speed(d->read_mb_s);
	p->gpu_flops = d->mflops ? serve_speed(d->mflops)
	                         : serve_speed(d->read_mb_s * SERVE_GPU_FLOP_PER_BYTE);
	p->gpu_unified = d->unified != 0;
	snprintf(p->gpu_backend, sizeof p->gpu_backend, "%s", d->backend);
	snprintf(p->gpu_name, sizeof p->gpu_name, "%s", d->name);
	return best;
}

/* Whether plans take the measured links (the control plane's probes):
 * only with tensor groups (the choice between a group and a pipeline is
 * what the latency decides; a pipeline-only cluster keeps every link at
 * 200 us, so new link figures never re-plan it), and never with an
 * explicit --link-us or the test hook SHOAL_TEST_TP_PREFER. */
bool serve__measured_links(const shoal_serve *cl)
{
	return cl->pol.tensor_groups && !cl->pol.tensor_prefer && !cl->cfg.link_us;
}

/* Whether the plan's prediction takes the data plane's links (the
 * records' dlinks, serve_probe.c): always but with an explicit --link-us.
 * They are what a hop and a tensor round pay on the wire, so the plan
 * predicts with them; but the plan is chosen on the links above, as
 * before: a data link's round trip grows while its far data thread is
 * busy (an echo waits for a run, or a drain's frames), and a plan that
 * followed it would move, pause and replay requests as the load comes
 * and goes (tests/sh/probe_busy.sh saw a 3-stage pipeline re-planned
 * twice in one request). So a new data-link bucket only predicts anew
 * (serve_predict, shoal_plan_take_times). */
bool serve__data_links(const shoal_serve *cl)
{
	return !cl->cfg.link_us;
}

/* schedule()'s view of the candidates (all but `skip`, when given): their
 * offered memory and bucketed speeds. Load is left out: each peer would
 * bucket it from its own history of the others' records, and the plans
 * would differ. Links: the ones `what` names of those the candidates
 * measured and gossiped (net/linkview.h: already bucketed by the peer that
 * measured them, so the same for everyone); a pair nobody measured yet is
 * at 200 us. An explicit --link-us puts every link at that figure
 * instead. */
static shoal_err serve_view(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                            const uint8_t *skip, unsigned what, shoal_view **out, char *why,
                            size_t why_len)
{
	uint32_t lus = cl->cfg.link_us ? cl->cfg.link_us : SHOAL_SERVE_LINK_US;
	shoal_view *view = shoal_view_new((uint64_t)lus * 1000u, SHOAL_SERVE_LINK_BW);
	shoal_err e = view ? SHOAL_OK : SHOAL_ERR_NOMEM;
	const shoal_record *recs[SHOAL_SERVE_MAX_PEERS];
	size_t nr = 0;
	for (size_t i = 0; i < nc && e == SHOAL_OK; i++) {
		const shoal_record *r = &cand[i]->record;
		if ((skip && !memcmp(r->id.b, skip, SHOAL_PEER_ID_LEN)) ||
		    nr == SHOAL_SERVE_MAX_PEERS)
			continue;
		recs[nr++] = r;
		shoal_view_peer p;
		memset(&p, 0, sizeof p);
		p.id = r->id;
		snprintf(p.name, sizeof p.name, "%s", r->name);
		p.mem_bytes = r->mem_weights;
		p.mem_bw = serve_speed(r->compute_mb_s);
		p.flops = serve_speed(r->compute_mflops);
		p.load_pct = 0;
		p.mtp = r->spec_mtp != 0;
		serve__gpu(r, &p);
		e = shoal_view_add_peer(view, &p, why, why_len);
	}
	if (e == SHOAL_OK && what)
		e = shoal_linkview_apply(view, recs, nr, what, NULL, why, why_len);
	if (e != SHOAL_OK) {
		shoal_view_free(view);
		view = NULL;
	}
	*out = view;
	return e;
}

/* The chosen plan p's times as the data links say (serve_data_links): the
 * same candidates planned from p with a policy that keeps any feasible
 * previous plan (gain 1000 permille, sessions as chosen), which evaluates
 * p on that view; its times replace p's when it is p (the same digest).
 * When it is not (p is infeasible there, or a tensor plan the view would
 * group otherwise), p keeps the times it was chosen with. */
static void serve_predict(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                          const shoal_policy *chosen, shoal_plan *p)
{
	shoal_view *view = NULL;
	shoal_plan *q = NULL;
	char why[SHOAL_WHY_LEN];
	unsigned what = (serve__measured_links(cl) ? SHOAL_LINKVIEW_CTL : 0) | SHOAL_LINKVIEW_DATA;
	size_t timed = 0;
	for (size_t i = 0; i < nc; i++)
		timed += cand[i]->record.n_dlinks;
	if (!timed) /* no data link timed yet: the view would be the chosen one */
		return;
	if (serve_view(cl, cand, nc, NULL, what, &view, why, sizeof why) != SHOAL_OK)
		return;
	shoal_policy pol = *chosen;
	pol.gain_permille = 1000;
	pol.near_permille = 0;
	if (shoal_schedule(view, &cl->mf, &pol, p, &q, why, sizeof why) == SHOAL_OK)
		shoal_plan_take_times(p, q);
	shoal_plan_free(q);
	shoal_view_free(view);
}

/* schedule() over the candidates (all but `skip`, when given); the plan
 * we act on (no skip) is then predicted on the data links. */
shoal_err serve__plan_on(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                         const uint8_t *skip, const shoal_plan *prev, shoal_plan **out,
                         uint32_t *sessions, char *why, size_t why_len)
{
	shoal_view *view = NULL;
	shoal_err e =
	    serve_view(cl, cand, nc, skip, serve__measured_links(cl) ? SHOAL_LINKVIEW_CTL : 0,
	               &view, why, why_len);
	if (e == SHOAL_OK && !skip) {
		size_t nl = shoal_view_n_links(view);
		cl->n_plan_links = nl < SHOAL_SERVE_MAX_PEERS ? nl : SHOAL_SERVE_MAX_PEERS;
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
	if (e == SHOAL_OK && !skip && serve__data_links(cl))
		serve_predict(cl, cand, nc, &pol, *out);
	return e;
}

/* serve_plan_on for the plan we act on next. The epoch floor (the
 * cluster's highest served epoch) rises when a peer finds our current
 * plan servable, before the others do; renumbering that plan then would
 * make the peers chase each other's floors. So when the floor has not
 * passed our current plan's epoch, no candidate announced another plan,
 * and the same inputs, numbered from just below that epoch, give our
 * current plan again, it stays as it is. */
shoal_err serve__plan_next(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc,
                           const shoal_plan *prev, shoal_plan **out, uint32_t *sessions, char *why,
                           size_t why_len)
{
	shoal_err e = serve__plan_on(cl, cand, nc, NULL, prev, out, sessions, why, why_len);
	const shoal_plan *cur = cl->plan;
	if (e != SHOAL_OK || !cur ||
	    !memcmp(shoal_plan_digest(*out), shoal_plan_digest(cur), SHOAL_DIGEST_BYTES) ||
	    shoal_plan_epoch(cur) < cl->pol.epoch_floor || shoal_plan_epoch(cur) == 0)
		return e;
	/* only while nobody announced another plan: a peer that moved on
	 * (e.g. restarted and planned from scratch) must be followed */
	for (size_t i = 0; i < nc; i++) {
		const shoal_record *r = &cand[i]->record;
		if (r->ready_epoch &&
		    memcmp(r->ready_digest, shoal_plan_digest(cur), SHOAL_DIGEST_BYTES))
			return e;
	}
	uint64_t floor = cl->pol.epoch_floor;
	shoal_plan *q = NULL;
	uint32_t qs = 0;
	char w[SHOAL_WHY_LEN];
	cl->pol.epoch_floor = shoal_plan_epoch(cur) - 1;
	shoal_err eq = serve__plan_on(cl, cand, nc, NULL, prev, &q, &qs, w, sizeof w);
	cl->pol.epoch_floor = floor;
	if (eq == SHOAL_OK &&
	    !memcmp(shoal_plan_digest(q), shoal_plan_digest(cur), SHOAL_DIGEST_BYTES)) {
		shoal_plan_free(*out);
		*out = q;
		if (sessions)
			*sessions = qs;
		return SHOAL_OK;
	}
	shoal_plan_free(q);
	return e;
}
