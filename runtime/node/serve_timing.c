/*
 * runtime/node/serve_timing.c: the plan's predicted ms/token beside the
 * decode steps this peer measures (timing.h): the predictions taken with
 * a plan (node thread), samples from the data thread's metrics snapshots,
 * the gap logged once, and the "timing" object of the status.
 *
 * Measured: end to end, the owner's decode steps (dist_owner.c: the send
 * of a token to the receipt of the next, so the hops to and from stage 0
 * are in it), on the peer that owns the sessions; per stage, the engine
 * runs of this peer's stage (dist_stage.c: wall time, its experts' round
 * trips included) that ran one row a session, i.e. decode rows, not
 * prompt chunks. Predicted: the plan's time per token and the stage's
 * own time (scheduler/plan.h: shoal_plan_stage.predicted_ns).
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <string.h>

#include "base/log.h"

void serve__timing_plan(shoal_serve *cl, bool anew)
{
	const shoal_plan *p = cl->plan;
	int32_t stage = -1;
	uint64_t st_ns = 0;
	for (size_t i = 0; p && stage < 0 && i < shoal_plan_n_stages(p); i++) {
		const shoal_plan_stage *st = shoal_plan_stage_at(p, i);
		shoal_plan_member mem[SHOAL_SERVE_MAX_PEERS];
		size_t k = shoal_plan_stage_members(p, i, mem, SHOAL_SERVE_MAX_PEERS);
		bool ours =
		    !memcmp(shoal_plan_peer_at(p, st->peer)->id.b, cl->cfg.self, SHOAL_PEER_ID_LEN);
		for (size_t j = 0; j < k && j < SHOAL_SERVE_MAX_PEERS; j++)
			ours |= !memcmp(shoal_plan_peer_at(p, mem[j].peer)->id.b, cl->cfg.self,
			                SHOAL_PEER_ID_LEN);
		if (ours) {
			stage = (int32_t)i;
			st_ns = st->predicted_ns;
		}
	}
	pthread_mutex_lock(&cl->mu);
	cl->tm_pred_ns = p ? shoal_plan_predicted_ns(p) : 0;
	cl->tm_stage = stage;
	cl->tm_stage_pred_ns = st_ns;
	if (!anew) {
		shoal_timing_series_reset(&cl->tm_owner);
		shoal_timing_series_reset(&cl->tm_run);
	}
	memset(&cl->tm_gap_owner, 0, sizeof cl->tm_gap_owner);
	memset(&cl->tm_gap_run, 0, sizeof cl->tm_gap_run);
	cl->tm_gap_taken = false;
	pthread_mutex_unlock(&cl->mu);
}

bool shoal_serve_take_gap(shoal_serve *cl, double *ratio)
{
	bool r = false;
	pthread_mutex_lock(&cl->mu);
	if (cl->tm_gap_run.logged && !cl->tm_gap_taken && cl->tm_stage_pred_ns) {
		cl->tm_gap_taken = r = true;
		*ratio = (double)shoal_timing_median(&cl->tm_run) / (double)cl->tm_stage_pred_ns;
	}
	pthread_mutex_unlock(&cl->mu);
	return r;
}

/* The mean of a counter's growth per event since the last snapshot (0:
 * no new event, or the counters restarted with a new part) */
static uint64_t timing_delta(uint64_t *last_n, uint64_t *last_ns, uint64_t n, uint64_t ns)
{
	uint64_t r = 0;
	if (n > *last_n && ns >= *last_ns)
		r = (ns - *last_ns) / (n - *last_n);
	*last_n = n;
	*last_ns = ns;
	return r;
}

void serve__timing_note(shoal_serve_dt *d, const shoal_dist_stage_metrics *sm,
                        const shoal_dist_owner_metrics *om)
{
	shoal_serve *cl = d->cl;
	uint64_t rows = sm->rows - (sm->rows >= d->tm_rows ? d->tm_rows : sm->rows);
	uint64_t runs = sm->runs - (sm->runs >= d->tm_runs ? d->tm_runs : sm->runs);
	d->tm_rows = sm->rows;
	uint64_t run = timing_delta(&d->tm_runs, &d->tm_run_ns, sm->runs, sm->run_ns);
	uint64_t step = timing_delta(&d->tm_steps, &d->tm_step_ns, om->steps, om->step_ns);
	/* decode runs: at most a row per session of the plan (a prompt
	 * chunk has more) */
	uint32_t sess = d->as ? d->as->sessions : 1;
	if (runs && rows > runs * (sess ? sess : 1))
		run = 0;
	if (!run && !step)
		return;
	bool log_step = false, log_run = false;
	uint64_t pred = 0, spred = 0, mstep = 0, mrun = 0;
	int32_t stage;
	pthread_mutex_lock(&cl->mu);
	if (step) {
		shoal_timing_push(&cl->tm_owner, step);
		log_step = shoal_timing_gap_note(&cl->tm_gap_owner, &cl->tm_owner, cl->tm_pred_ns);
	}
	if (run) {
		shoal_timing_push(&cl->tm_run, run);
		log_run = shoal_timing_gap_note(&cl->tm_gap_run, &cl->tm_run, cl->tm_stage_pred_ns);
	}
	pred = cl->tm_pred_ns;
	spred = cl->tm_stage_pred_ns;
	stage = cl->tm_stage;
	mstep = shoal_timing_median(&cl->tm_owner);
	mrun = shoal_timing_median(&cl->tm_run);
	pthread_mutex_unlock(&cl->mu);
	if (log_step)
		SHOAL_LOG_W("cluster",
		            "decode steps take %.3f ms/token (median of the last %u), the plan "
		            "predicted %.3f ms (%.2fx) for %u steps in a row: its figures for "
		            "this cluster are off (logged once per plan)",
		            (double)mstep / 1e6, SHOAL_TIMING_WINDOW, (double)pred / 1e6,
		            (double)mstep / (double)pred, SHOAL_TIMING_GAP_STEPS);
	if (log_run)
		SHOAL_LOG_W("cluster",
		            "stage %d runs take %.3f ms (median of the last %u), the plan "
		            "predicted %.3f ms (%.2fx) for %u runs in a row: its figures for "
		            "this peer are off (logged once per plan)",
		            stage, (double)mrun / 1e6, SHOAL_TIMING_WINDOW, (double)spred / 1e6,
		            (double)mrun / (double)spred, SHOAL_TIMING_GAP_STEPS);
}

void serve__timing_get(shoal_serve *cl, serve__timing *t)
{
	pthread_mutex_lock(&cl->mu);
	t->pred_ns = cl->tm_pred_ns;
	t->stage = cl->tm_stage;
	t->stage_pred_ns = cl->tm_stage_pred_ns;
	t->step_ns = shoal_timing_median(&cl->tm_owner);
	t->steps = cl->tm_owner.count;
	t->run_ns = shoal_timing_median(&cl->tm_run);
	t->runs = cl->tm_run.count;
	t->gap_logged = cl->tm_gap_owner.logged || cl->tm_gap_run.logged;
	pthread_mutex_unlock(&cl->mu);
}

static json_t *timing_ms(uint64_t ns)
{
	return ns ? json_real((double)ns / 1e6) : json_null();
}

json_t *serve__timing_json(shoal_serve *cl)
{
	serve__timing t;
	serve__timing_get(cl, &t);
	json_t *o = json_object();
	json_object_set_new(o, "predicted_ms_per_token", timing_ms(t.pred_ns));
	json_object_set_new(o, "measured_ms_per_token", timing_ms(t.step_ns));
	json_object_set_new(o, "steps", json_integer((json_int_t)t.steps));
	json_object_set_new(o, "window", json_integer(SHOAL_TIMING_WINDOW));
	json_object_set_new(o, "gap_logged", json_boolean(t.gap_logged));
	json_t *s = json_null();
	if (t.stage >= 0)
		s = json_pack("{si so so sI}", "index", (int)t.stage, "predicted_ms",
		              timing_ms(t.stage_pred_ns), "measured_ms", timing_ms(t.run_ns),
		              "runs", (json_int_t)t.runs);
	json_object_set_new(o, "stage", s);
	return o;
}
