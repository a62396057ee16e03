/*
 * runtime/node/serve_data.c: the data thread: it takes each new assignment
 * (the old plan's links, stage and owner go; runs in flight pause), drains
 * every ready link into the stage's pending batch or the owner, runs the
 * batch, starts and checks runs (serve_runs.c), and waits for the next
 * frame with a short spin while a frame is due. Rows of several sessions
 * that arrive together run as one batch.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/thread.h"

/* Take a new assignment: the old plan's links, stage and owner go. Runs
 * in flight pause: each goes back to the queue with its history (prompt
 * and the tokens streamed), which the next servable plan replays as a
 * prefill before the run goes on (DESIGN section 5). */
static void serve_take_assign(shoal_serve_dt *d, shoal_serve_assign *a)
{
	shoal_serve *cl = d->cl;
	uint64_t now = shoal_clock_now_us();
	serve__links_close(d, "the plan changed");
	shoal_dist_owner_free(d->owner);
	d->owner = NULL;
	d->live = 0;
	for (uint32_t i = 0; i < SHOAL_SERVE_MAX_RUNS; i++) {
		shoal_serve_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool live = r->state == SHOAL_SERVE_RUN_STARTED && !r->ended;
		pthread_mutex_unlock(&cl->mu);
		if (live)
			serve__pause(cl, i, now, 0, "the plan changed");
	}
	serve__free_assign(d->as);
	d->as = a;
	/* the expert server goes to its thread (which frees the one it had) */
	pthread_mutex_lock(&cl->mu);
	shoal_dist_stage_free(cl->x_pending);
	cl->x_pending = a->experts;
	cl->x_pending_set = true;
	cl->have_stage = a->stage != NULL;
	memset(&cl->met_stage, 0, sizeof cl->met_stage);
	memset(&cl->met_owner, 0, sizeof cl->met_owner);
	pthread_mutex_unlock(&cl->mu);
	a->experts = NULL;
	serve__xwake(cl);
	shoal_dist_owner_config oc;
	memset(&oc, 0, sizeof oc);
	memcpy(oc.self, cl->cfg.self, SHOAL_PEER_ID_LEN);
	memcpy(oc.first, a->first, SHOAL_PEER_ID_LEN);
	memcpy(oc.digest, a->digest, SHOAL_DIGEST_BYTES);
	oc.epoch = a->epoch;
	oc.max_sessions = a->sessions;
	oc.max_rows = SHOAL_SERVE_MAX_ROWS;
	oc.link = serve__link;
	oc.link_ctx = &cl->lctx_stage;
	oc.timeout_ms = (int)SHOAL_SERVE_SILENCE_MS / 3;
	oc.prefix_cache = cl->cfg.prefix_bytes != 0;
	oc.n_ctx = cl->pol.ctx;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_dist_owner_new(&oc, &d->owner, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_W("cluster", "cannot make the session owner: %s", why);
}

static void serve_dispatch(shoal_serve_dt *d, shoal_xfer_link *k, int role,
                           const shoal_xfer_frame *f)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e = SHOAL_OK;
	const shoal_serve_assign *a = d->as;
	if (f->hdr.kind == SHOAL_XFER_KIND_EXPERT_REQ &&
	    !(a && a->stage && f->hdr.layer_first >= a->l0 && f->hdr.layer_first < a->l1)) {
		/* other layers' experts are the expert thread's, on EXPERTS links */
		SHOAL_LOG_W("cluster", "expert request for layer %u on a stage link: dropped",
		            f->hdr.layer_first);
	} else if (f->hdr.kind == SHOAL_XFER_KIND_ERROR) {
		if (f->hdr.n_aux != SHOAL_ERR_CLOSED) /* not a goodbye: say it */
			SHOAL_LOG_W("cluster", "data link error from the peer: %.*s",
			            (int)(f->hdr.payload_len < 200 ? f->hdr.payload_len : 200),
			            (const char *)f->payload);
	} else if (role == SHOAL_SERVE_ROLE_OWNER) {
		if (d->owner)
			e = shoal_dist_owner_handle(d->owner, k, f, why, sizeof why);
	} else if (a && a->stage) {
		/* joins the pending batch; the data thread flushes after draining */
		e = shoal_dist_stage_take(a->stage, k, f, why, sizeof why);
#ifdef SHOAL_TEST_HOOKS
		if (d->test_frame_ms)
			usleep(1000u * d->test_frame_ms);
#endif
	} else {
		SHOAL_LOG_W("cluster", "a stage frame, but no stage here; dropped");
	}
	if (e != SHOAL_OK)
		SHOAL_LOG_W("cluster", "data frame: %s", why[0] ? why : shoal_strerror(e));
}

/* Start what waits, oldest slot first, while the owner has sessions: a
 * new request, or a paused one whose history replays as its prompt. */
/* Hand every frame waiting on link k to its object; false when the link
 * is gone (broken, or closed after the peer's goodbye: *bye set). */
static bool serve_drain_link(shoal_serve_dt *d, shoal_xfer_link *k, int role, bool *bye)
{
	shoal_xfer_frame f;
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e;
	while ((e = shoal_xfer_link_recv(k, 0, &f, why, sizeof why)) != SHOAL_ERR_TIMEOUT) {
		if (e == SHOAL_OK) {
			if (f.hdr.kind == SHOAL_XFER_KIND_ERROR && f.hdr.n_aux == SHOAL_ERR_CLOSED)
				*bye = true;
			d->frame_us = shoal_clock_now_us();
			serve_dispatch(d, k, role, &f);
			if (shoal_clock_now_us() - d->echo_us > SHOAL_SERVE_ECHO_EVERY_US)
				serve__probe_answer(d);
		} else if (e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
			SHOAL_LOG_W("cluster", "data frame dropped: %s", why);
		} else {
			SHOAL_LOG_I("cluster", "data link closed%s: %s", *bye ? " (goodbye)" : "",
			            why);
			return false;
		}
	}
	return true;
}

/* Metrics snapshots for `shoal status` (the node thread renders them). */
static void serve_publish(shoal_serve_dt *d)
{
	shoal_dist_stage_metrics sm;
	shoal_dist_owner_metrics om;
	memset(&sm, 0, sizeof sm);
	memset(&om, 0, sizeof om);
	if (d->as && d->as->stage)
		shoal_dist_stage_metrics_get(d->as->stage, &sm);
	if (d->owner)
		shoal_dist_owner_metrics_get(d->owner, &om);
	/* the longest run of the last minute, for probe echoes: a longer one
	 * replaces it, and it falls back to the latest after a minute */
	uint64_t now = shoal_clock_now_us();
	if (sm.last_run_ns > d->run_max_ns || now - d->run_max_us > SHOAL_SERVE_RUN_MAX_US) {
		d->run_max_ns = sm.last_run_ns;
		d->run_max_us = now;
	}
	pthread_mutex_lock(&d->cl->mu);
	d->cl->met_stage = sm;
	d->cl->met_owner = om;
	pthread_mutex_unlock(&d->cl->mu);
	serve__timing_note(d, &sm, &om);
}

/* Wait for a frame or a wake-up. A thread that blocks in poll(2) is woken
 * by the frame only after its core left idle: on the 2-vCPU machine of
 * tests/bench/dist_bench.sh ~40-50 us a wake-up (perf sched), twice a
 * token with 2 stages. So while a frame is expected soon (a session of
 * ours generates, or a frame came within SHOAL_SERVE_HOP_ACTIVE_MS) and
 * the recent waits were shorter than spin_us, poll is called without a
 * timeout until a descriptor is ready or spin_us passed, then it blocks.
 * Between two polls the thread yields: a thread woken on its core (the
 * node's, ZeroMQ's, a client's) runs at once instead of taking the core
 * for a time slice later. Waits longer than the spin (a large model's
 * stage) block at once: the wake-up is then a small part of them. A poll
 * that returns SHOAL_SERVE_HOP_GAP_US after it was called means the
 * thread was preempted (more busy threads than cores): spinning then only
 * slows the peer that computes, so it stops for
 * SHOAL_SERVE_HOP_BACKOFF_MS. (The time given away in sched_yield is not
 * counted: a busy thread on the same core gets it back at each yield.) dist_bench, austen, 5
 * rounds, spin 0 against 2000 us: 134 -> 90 us a hop with 2 stages, 85 -> 52 with 3. */
static void serve_wait(shoal_serve_dt *d, struct pollfd *pf, int np)
{
	const uint32_t spin_us = d->cl->cfg.hop_spin_us;
	uint64_t t0 = shoal_clock_now_us(), t = t0;
	bool active = d->live || t0 - d->frame_us <= SHOAL_SERVE_HOP_ACTIVE_MS * 1000u;
	int ready = 0;
	if (active && spin_us && t0 >= d->spin_off_us && d->wait_us <= spin_us) {
		uint64_t end = t0 + spin_us;
		while (!(ready = poll(pf, (nfds_t)np, 0) > 0)) {
			uint64_t u = shoal_clock_now_us();
			if (u - t > SHOAL_SERVE_HOP_GAP_US) {
				d->spin_off_us = u + SHOAL_SERVE_HOP_BACKOFF_MS * 1000u;
				SHOAL_LOG_D(
				    "cluster", "spin: off the core for %llu us; blocking for %u ms",
				    (unsigned long long)(u - t), SHOAL_SERVE_HOP_BACKOFF_MS);
				break;
			}
			if (u >= end)
				break;
			sched_yield(); /* a thread woken on this core runs first */
			t = shoal_clock_now_us();
		}
	}
	if (!ready)
		ready = poll(pf, (nfds_t)np, 50) > 0;
	if (active && ready) { /* the average of the latest ~4 */
		uint64_t w = shoal_clock_now_us() - t0;
		d->wait_us = d->wait_us ? (3 * d->wait_us + w) / 4 : w;
	}
}

void *serve__data_main(void *arg)
{
	shoal_serve *cl = arg;
	shoal_serve_dt *d = calloc(1, sizeof *d);
	shoal_serve_tokctx tcs[SHOAL_SERVE_MAX_RUNS];
	if (!d) {
		SHOAL_LOG_E("cluster", "data thread: out of memory");
		return NULL;
	}
	shoal_thread_compute(); /* its wake-up is the pipeline's critical path */
	shoal_thread_name("shoal-data");
	d->cl = cl;
	cl->dt = d;
#ifdef SHOAL_TEST_HOOKS
	const char *fm = getenv("SHOAL_TEST_FRAME_MS");
	d->test_frame_ms = fm ? (uint32_t)strtoul(fm, NULL, 10) : 0;
#endif
	for (;;) {
		shoal_serve_assign *na = NULL;
		pthread_mutex_lock(&cl->mu);
		if (cl->stop) {
			pthread_mutex_unlock(&cl->mu);
			break;
		}
		if (cl->pending_set) {
			na = cl->pending;
			cl->pending = NULL;
			cl->pending_set = false;
		}
		bool eps_new = cl->eps_version != d->eps_version;
		if (eps_new) {
			memcpy(d->eps, cl->eps, cl->n_eps * sizeof *cl->eps);
			d->n_eps = cl->n_eps;
			d->eps_version = cl->eps_version;
		}
		pthread_mutex_unlock(&cl->mu);
		if (na)
			serve_take_assign(d, na);
		if (eps_new && d->as && d->as->stage) {
			/* the sessions of owners that left the view are freed */
			uint8_t ids[SHOAL_SERVE_MAX_PEERS][SHOAL_PEER_ID_LEN];
			for (size_t i = 0; i < d->n_eps; i++)
				memcpy(ids[i], d->eps[i].id, SHOAL_PEER_ID_LEN);
			shoal_dist_stage_keep_owners(
			    d->as->stage, (const uint8_t(*)[SHOAL_PEER_ID_LEN])ids, d->n_eps);
		}
		serve__adopt(d);
		serve__start_runs(d, tcs);
		/* wait for frames or a wake-up */
		struct pollfd pf[1 + 3 * (2 * SHOAL_SERVE_LINKS + SHOAL_SERVE_MAX_PEERS)];
		int np = 0;
		pf[np].fd = cl->wake[0];
		pf[np].events = POLLIN;
		np++;
		/* (a group member's slices are read in its stage's exchange) */
		for (size_t i = 0; i < d->n_in; i++)
			if (d->in[i].role != SHOAL_SERVE_ROLE_TENSOR)
				np += shoal_xfer_link_pollfds(d->in[i].k, pf + np, 3);
		/* links we send on: a peer's goodbye or a broken connection shows
		 * there first (EXPERTS links are read by the stage's collect) */
		for (size_t i = 0; i < d->n_out; i++)
			if (d->out[i].role != SHOAL_SERVE_ROLE_EXPERTS)
				np += shoal_xfer_link_pollfds(d->out[i].k, pf + np, 3);
		np += serve__probe_pollfds(d, pf + np, (int)(sizeof pf / sizeof pf[0]) - np);
		serve_wait(d, pf, np);
		char drain[64];
		while (read(cl->wake[0], drain, sizeof drain) > 0)
			;
		/* Read every link (cheap: recv with timeout 0), the links we send
		 * on first: a goodbye waiting there (the peer changed plans while
		 * this thread was stopped or busy) must be read before a frame from
		 * an in-link makes the owner or stage send on it, or the send's
		 * error would look like the peer's death. */
		for (size_t i = 0; i < d->n_out;) {
			if (d->out[i].role == SHOAL_SERVE_ROLE_EXPERTS ||
			    serve_drain_link(d, d->out[i].k, d->out[i].role, &d->out[i].bye))
				i++;
			else
				serve__out_drop(d, i);
		}
		for (size_t i = 0; i < d->n_in;) {
			char why[SHOAL_WHY_LEN];
			if (d->in[i].role == SHOAL_SERVE_ROLE_TENSOR ||
			    serve_drain_link(d, d->in[i].k, d->in[i].role, &d->in[i].bye)) {
				i++;
				continue;
			}
			snprintf(why, sizeof why, "its data link to us broke: %.*s",
			         SHOAL_WHY_QUOTE(sizeof why, 32),
			         shoal_xfer_link_status(d->in[i].k));
			serve__link_broke(d, d->in[i].peer, d->in[i].inc,
			                  d->in[i].bye || shoal_xfer_link_peer_bye(d->in[i].k),
			                  why);
			shoal_xfer_link_free(d->in[i].k);
			d->in[i] = d->in[--d->n_in];
		}
		serve__probe_answer(d);
		if (d->as && d->as->stage) {
			char why[SHOAL_WHY_LEN] = "";
			if (shoal_dist_stage_flush(d->as->stage, why, sizeof why) != SHOAL_OK)
				SHOAL_LOG_W("cluster", "stage: %s", why);
		}
		serve__check_runs(d);
		serve_publish(d);
	}
	serve__links_close(d, "the node stops");
	serve__probe_close(d);
	shoal_dist_owner_free(d->owner);
	serve__free_assign(d->as);
	cl->dt = NULL;
	free(d);
	return NULL;
}

/* ------------------------------------------------------------- start/stop */

shoal_err serve__data_start(shoal_serve *cl, char *why, size_t why_len)
{
	shoal_xfer_config_default(&cl->xcfg);
	memcpy(cl->xcfg.self_id, cl->cfg.self, SHOAL_PEER_ID_LEN);
	/* peers share cores in a lab: block at once instead of spinning */
	cl->xcfg.spin_us = 0;
	/* one context, PD, pool and CQ per RDMA device for all our links */
	cl->xcfg.rdma = cl->cfg.rdma;
	cl->xcfg.rdma_hub = cl->xcfg.verbs ? shoal_xfer_rdma_hub_new() : NULL;
	shoal_err e = shoal_xfer_listener_new(
	    &cl->xcfg, cl->cfg.data_host ? cl->cfg.data_host : "0.0.0.0", cl->cfg.data_port,
	    serve__admit, cl, &cl->listener, why, why_len);
	if (e != SHOAL_OK)
		return e;
	if (pthread_create(&cl->acc_thr, NULL, serve__accept_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the accept thread");
	cl->acc_started = true;
	if (pthread_create(&cl->data_thr, NULL, serve__data_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the data thread");
	cl->data_started = true;
	if (pthread_create(&cl->x_thr, NULL, serve__experts_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the expert thread");
	cl->x_started = true;
	if (pthread_create(&cl->probe_thr, NULL, serve__probe_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the data prober");
	cl->probe_started = true;
	return SHOAL_OK;
}

void serve__data_stop(shoal_serve *cl)
{
	if (cl->mu_ok) {
		pthread_mutex_lock(&cl->mu);
		cl->stop = 1;
		if (cl->cv_ok)
			pthread_cond_broadcast(&cl->cv);
		pthread_mutex_unlock(&cl->mu);
	}
	if (cl->wake[1] >= 0)
		serve__wake(cl);
	if (cl->xwake[1] >= 0)
		serve__xwake(cl);
	if (cl->x_started)
		pthread_join(cl->x_thr, NULL);
	if (cl->probe_started)
		pthread_join(cl->probe_thr, NULL);
	if (cl->data_started)
		pthread_join(cl->data_thr, NULL);
	if (cl->acc_started)
		pthread_join(cl->acc_thr, NULL);
	cl->data_started = cl->acc_started = cl->x_started = cl->probe_started = false;
	for (size_t i = 0; i < cl->n_acc; i++)
		shoal_xfer_link_free(cl->acc[i]);
	cl->n_acc = 0;
	for (size_t i = 0; i < cl->n_xacc; i++)
		shoal_xfer_link_free(cl->xacc[i]);
	cl->n_xacc = 0;
	shoal_dist_stage_free(cl->x_pending);
	cl->x_pending = NULL;
	shoal_xfer_listener_free(cl->listener);
	cl->listener = NULL;
	shoal_xfer_rdma_hub_free(cl->xcfg.rdma_hub); /* devices stay until their last link */
	cl->xcfg.rdma_hub = NULL;
}
