/*
 * runtime/node/serve_ready.c: servability (step 4 of shoal_serve_update): a
 * plan is servable when every peer it names announced its digest
 * (DESIGN.md section 4); the reason shown while it is not; the plan kept
 * once it was. Node thread; what the data thread reads goes under mu.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

/* Step 4 of shoal_serve_update: the plan is servable when every peer it
 * names announced its digest; the reason when it is not; a plan that
 * became servable is kept (the previous plan of the next start). Returns 1
 * when the record must be republished (a higher served epoch). */
int serve__judge(shoal_serve *cl, const shoal_swim_member *const *cand, size_t nc)
{
	char why[SHOAL_WHY_LEN] = "";
	int republish = 0;
	cl->n_cand = nc;
	bool servable = false;
	if (cl->plan) {
		shoal_ready *rd = shoal_ready_new();
		for (size_t i = 0; rd && i < nc; i++) {
			const shoal_record *r = &cand[i]->record;
			cl->cand[i].id = r->id;
			cl->cand[i].ready =
			    r->ready_epoch && !memcmp(r->ready_digest, shoal_plan_digest(cl->plan),
			                              SHOAL_DIGEST_BYTES);
			if (r->ready_epoch)
				shoal_ready_announce(rd, &cl->cand[i].id, r->ready_digest);
		}
		servable = rd && shoal_ready_servable(rd, cl->plan);
		uint32_t missing[SHOAL_SERVE_MAX_PEERS];
		size_t nm =
		    rd ? shoal_ready_missing(rd, cl->plan, missing, SHOAL_SERVE_MAX_PEERS) : 0;
		if (!servable && cl->ready_why[0])
			snprintf(why, sizeof why, "not ready here: %.*s",
			         SHOAL_WHY_QUOTE(sizeof why, 32), cl->ready_why);
		else if (!servable)
			snprintf(why, sizeof why, "waiting for %zu peer(s) to be ready, first %s",
			         nm, nm ? shoal_plan_peer_at(cl->plan, missing[0])->name : "?");
		/* a peer that stays ready for another plan of the same peers
		 * most likely plans with another policy: say which options */
		for (size_t i = 0; !servable && nm && i < nc; i++) {
			const shoal_record *r = &cand[i]->record;
			if (memcmp(r->id.b, shoal_plan_peer_at(cl->plan, missing[0])->id.b,
			           SHOAL_PEER_ID_LEN) ||
			    !r->ready_epoch)
				continue;
			size_t l = strlen(why);
			snprintf(
			    why + l, sizeof why - l,
			    " (it is ready for another plan, epoch %llu: if this lasts, do all "
			    "peers give the same --ctx, --sessions, --spread-experts, --tensor, "
			    "--link-us?)",
			    (unsigned long long)r->ready_epoch);
		}
		shoal_ready_free(rd);
	} else {
		snprintf(why, sizeof why, "no plan: %.*s", SHOAL_WHY_QUOTE(sizeof why, 32),
		         cl->plan_why);
	}
	pthread_mutex_lock(&cl->mu);
	snprintf(cl->shared_why, sizeof cl->shared_why, "%s", servable ? "" : why);
	/* refused at once unless a peer of the plan died a moment ago */
	bool died_lately =
	    cl->died_us && shoal_clock_now_us() - cl->died_us <
	                       (uint64_t)SHOAL_SERVE_DIED_WAIT_MULT * cl->cfg.base_ms * 1000u;
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
			serve__plan_save(cl);
			if (shoal_plan_epoch(cl->plan) > cl->served_epoch) {
				cl->served_epoch = shoal_plan_epoch(cl->plan);
				republish = 1;
			}
		}
		pthread_mutex_lock(&cl->mu);
		cl->shared_servable = servable;
		pthread_mutex_unlock(&cl->mu);
		serve__wake(cl);
	}
	return republish;
}
