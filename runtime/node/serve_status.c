/*
 * runtime/node/serve_status.c: the "plan" object of `shoal status --json`
 * (shoal_serve_status_json): the plan, readiness, the peers left out, the
 * links, the weights and the data thread's metrics snapshots. Node thread.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <string.h>

#include "base/hex.h"
#include "runtime/node/plan_json.h"

static json_t *serve_idstr(const uint8_t id[SHOAL_PEER_ID_LEN])
{
	char hex[SHOAL_PEER_ID_HEX_LEN];
	shoal_hex_encode(id, 16, hex);
	return json_string(hex);
}

static json_t *serve_stage_met_json(const shoal_dist_stage_metrics *m)
{
	json_t *o = json_pack(
	    "{sI sI sI sI sI sI sI sI sI sI sI}", "runs", (json_int_t)m->runs, "run_ns",
	    (json_int_t)m->run_ns, "batched_runs", (json_int_t)m->batched_runs, "rows",
	    (json_int_t)m->rows, "hidden_sent", (json_int_t)m->hidden_sent, "tokens_sent",
	    (json_int_t)m->tokens_sent, "expert_reqs", (json_int_t)m->expert_reqs, "expert_served",
	    (json_int_t)m->expert_served, "expert_timeouts", (json_int_t)m->expert_timeouts,
	    "dropped", (json_int_t)m->dropped, "session_errors", (json_int_t)m->session_errors);
	if (o)
		json_object_update_new(o, json_pack("{s{sI sI sI sI sI sI}}", "prefix_cache",
		                                    "hits", (json_int_t)m->prefix_hits,
		                                    "hit_tokens", (json_int_t)m->prefix_hit_tokens,
		                                    "evictions", (json_int_t)m->prefix_evictions,
		                                    "entries", (json_int_t)m->prefix_entries,
		                                    "tokens", (json_int_t)m->prefix_tokens, "bytes",
		                                    (json_int_t)m->prefix_bytes));
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
static json_t *serve_data_json(shoal_serve *cl)
{
	pthread_mutex_lock(&cl->mu);
	shoal_dist_stage_metrics st = cl->met_stage, ex = cl->met_experts;
	shoal_dist_owner_metrics ow = cl->met_owner;
	bool hs = cl->have_stage, hx = cl->have_experts;
	pthread_mutex_unlock(&cl->mu);
	json_t *d = json_object();
	json_object_set_new(d, "stage", hs ? serve_stage_met_json(&st) : json_null());
	json_object_set_new(d, "experts", hx ? serve_stage_met_json(&ex) : json_null());
	json_t *own = json_pack("{sI sI sI sI sI}", "tokens", (json_int_t)ow.tokens, "token_frames",
	                        (json_int_t)ow.token_frames, "dropped", (json_int_t)ow.dropped,
	                        "steps", (json_int_t)ow.steps, "step_ns", (json_int_t)ow.step_ns);
	if (own) /* speculation (runtime/dist/dist.h) */
		json_object_update_new(own, json_pack("{s{sI sI sI sI}}", "spec", "drafted",
		                                      (json_int_t)ow.drafted, "accepted",
		                                      (json_int_t)ow.accepted, "steps",
		                                      (json_int_t)ow.spec_steps, "pauses",
		                                      (json_int_t)ow.spec_pauses));
	json_object_set_new(d, "owner", own);
	return d;
}

json_t *shoal_serve_status_json(shoal_serve *cl)
{
	json_t *o = cl->plan ? shoal_plan_to_json(cl->plan) : json_object();
	if (!o)
		return NULL;
	char hex[65];
	shoal_model_id_hex(cl->model_id, hex);
	json_object_set_new(o, "model_id", json_string(hex));
	json_object_set_new(o, "servable", json_boolean(cl->servable));
	/* the planning policy, which every peer must share */
	json_object_set_new(
	    o, "policy",
	    json_pack("{sI sI sb sb sI}", "ctx", (json_int_t)cl->pol.ctx, "sessions",
	              (json_int_t)cl->cfg.sessions, "spread_experts", cl->pol.spread_experts,
	              "tensor_groups", cl->pol.tensor_groups, "link_us",
	              (json_int_t)(cl->cfg.link_us ? cl->cfg.link_us : SHOAL_SERVE_LINK_US)));
	/* the measured links the plan was made with (the rest at link_us) */
	json_t *pl = json_array();
	for (size_t i = 0; i < cl->n_plan_links; i++)
		json_array_append_new(
		    pl, json_pack("{so so sI sI}", "a", serve_idstr(cl->plan_links[i].a.b), "b",
		                  serve_idstr(cl->plan_links[i].b.b), "latency_us",
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
		                    json_string(cl->ready_why[0] ? cl->ready_why
		                                : cl->shared_why[0]
		                                    ? cl->shared_why
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
			json_array_append_new(r ? ready : not_ready, serve_idstr(pp->id.b));
		}
	json_object_set_new(o, "ready", ready);
	json_object_set_new(o, "not_ready", not_ready);
	json_t *left = json_array();
	for (size_t i = 0; i < cl->n_left; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "peer", serve_idstr(cl->left[i].id.b));
		json_object_set_new(e, "name", json_string(cl->left[i].name));
		json_object_set_new(e, "why", json_string(cl->left[i].why));
		json_array_append_new(left, e);
	}
	json_object_set_new(o, "left_out", left);
	json_t *links = json_array();
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_link_status; i++) {
		json_t *e = json_object();
		json_object_set_new(e, "peer", serve_idstr(cl->link_peer[i]));
		json_object_set_new(e, "transport", json_string(cl->link_status[i]));
		json_array_append_new(links, e);
	}
	pthread_mutex_unlock(&cl->mu);
	json_object_set_new(o, "links", links);
	json_object_set_new(o, "data", serve_data_json(cl));
	json_object_set_new(o, "timing", serve__timing_json(cl));
	/* each stage's predicted time (its own work, not the hop into it) */
	for (size_t i = 0; cl->plan && i < shoal_plan_n_stages(cl->plan); i++)
		json_object_set_new(
		    json_array_get(json_object_get(o, "stages"), i), "predicted_ms",
		    json_real((double)shoal_plan_stage_at(cl->plan, i)->predicted_ns / 1e6));
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
