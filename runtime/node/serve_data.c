/*
 * runtime/node/cluster_data.c: the data-thread half of runtime/node/cluster.h: the
 * xfer listener (on an accept thread, so that a peer's connection to its
 * own listener completes its handshake while the data thread waits), the
 * links, the stage and the session owner (the data thread), and the
 * expert server (the expert thread).
 *
 * Divisions: admission tokens; links; the accept thread; events; the data
 * thread; the expert thread; start/stop.
 *
 * Links are keyed by (peer, role). The role says which object on the far
 * side gets the frames: STAGE (token ids from an owner, hidden states from
 * the previous stage, session control; the data thread's stage), OWNER
 * (results from the last stage; the data thread's owner) or EXPERTS
 * (EXPERT_REQ frames of a stage to a peer that holds experts of its
 * layers; the expert thread's server, so that two peers that serve each
 * other's experts never wait on each other's stage). The data thread
 * drains every ready link before its stage runs: rows of several sessions
 * that arrive together run as one batch. A link is
 * admitted only with token = BLAKE2b-256 keyed by the cluster key over
 * ("shoal-data-v1", connector id, plan digest, role) + the role byte, so
 * only a peer with the key, for the current plan, gets a link.
 */
#include "config.h"

#include "runtime/node/cluster_impl.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "base/hex.h"
#include "base/log.h"
#include "base/thread.h"

static uint64_t shoal_cluster_data_now_us(void)
{
	return shoal_clock_now_us();
}

/* One byte into the write end of a wake-up pipe (full: already woken). */
static void shoal_cluster_poke(int fd, const char *what)
{
	char c = 1;
	if (write(fd, &c, 1) < 0 && errno != EAGAIN)
		SHOAL_LOG_W("cluster", "%s: %s", what, strerror(errno));
}

void shoal_cluster__wake(shoal_cluster *cl)
{
	shoal_cluster_poke(cl->wake[1], "wake");
}

static void shoal_cluster_xwake(shoal_cluster *cl)
{
	shoal_cluster_poke(cl->xwake[1], "expert wake");
}

void shoal_cluster__free_assign(shoal_cluster_assign *a)
{
	if (!a)
		return;
	shoal_dist_stage_free(a->stage);
	shoal_dist_stage_free(a->experts);
	free(a);
}

/* ------------------------------------------------------- admission tokens */

void shoal_cluster__token(const shoal_cluster *cl, const uint8_t peer[16], const uint8_t digest[32],
                          int role, uint8_t out[33])
{
	shoal_weights_link_token(&cl->key, peer, digest, role, out);
}

static int shoal_cluster_admit(void *ctx, const uint8_t peer[16], const char *addr,
                               const uint8_t *token, size_t token_len)
{
	shoal_cluster *cl = ctx;
	uint8_t digest[32], want[33];
	if (token_len != 33 ||
	    (token[32] != SHOAL_CLUSTER_ROLE_STAGE && token[32] != SHOAL_CLUSTER_ROLE_OWNER &&
	     token[32] != SHOAL_CLUSTER_ROLE_EXPERTS && token[32] != SHOAL_CLUSTER_ROLE_WEIGHTS &&
	     token[32] != SHOAL_CLUSTER_ROLE_TENSOR)) {
		SHOAL_LOG_W("cluster", "data link from %s refused: malformed token", addr);
		return 0;
	}
	pthread_mutex_lock(&cl->mu);
	memcpy(digest, cl->shared_digest, 32);
	pthread_mutex_unlock(&cl->mu);
	if (token[32] == SHOAL_CLUSTER_ROLE_WEIGHTS) /* a joiner has no plan: the model id */
		memcpy(digest, cl->model_id, 32);
	shoal_cluster__token(cl, peer, digest, token[32], want);
	if (sodium_memcmp(want, token, 33) != 0) {
		SHOAL_LOG_W("cluster",
		            "data link from %s refused: token not for our plan (other key or plan)",
		            addr);
		return 0;
	}
	cl->admit_role = token[32];
	return 1;
}

/* ---------------------------------------------------------------- links */

/* Data thread only. */
struct shoal_cluster_dt {
	shoal_cluster *cl;
	shoal_cluster_assign *as;
	shoal_dist_owner *owner;
	shoal_cluster_ep eps[SHOAL_CLUSTER_MAX_PEERS];
	size_t n_eps;
	uint64_t eps_version;
	/* links we dialled (out) and accepted (in); `inc` is the peer's
	 * incarnation when the link was made, `bye` that it said goodbye */
	struct {
		uint8_t peer[16];
		int role;
		uint64_t inc;
		bool bye;
		shoal_xfer_link *k;
	} out[SHOAL_CLUSTER_LINKS];
	size_t n_out;
	struct {
		uint8_t peer[16];
		int role;
		uint64_t inc;
		bool bye;
		shoal_xfer_link *k;
	} in[SHOAL_CLUSTER_LINKS];
	size_t n_in;
	uint32_t live; /* runs started and not ended */
	/* the spin before a wait (shoal_cluster_wait) */
	uint64_t frame_us;    /* when the latest frame was handled */
	uint64_t spin_off_us; /* no spinning before then: the core is shared */
	uint64_t wait_us;     /* the recent waits for a frame, averaged; 0: none yet */
};
typedef struct shoal_cluster_dt shoal_cluster_dt;

static void shoal_cluster_event_push(shoal_cluster *cl, const shoal_cluster_event *ev);

static const shoal_cluster_ep *shoal_cluster_ep_of(const shoal_cluster_dt *d,
                                                   const uint8_t peer[16])
{
	for (size_t i = 0; i < d->n_eps; i++)
		if (!memcmp(d->eps[i].id, peer, 16))
			return &d->eps[i];
	return NULL;
}

/* A link to `peer` broke. Without its goodbye that is evidence the peer
 * died (a crash, a kill, a pulled cable): the node thread declares it
 * dead at once instead of waiting for gossip to suspect it. */
static void shoal_cluster_link_broke(shoal_cluster_dt *d, const uint8_t peer[16], uint64_t inc,
                                     bool bye, const char *why)
{
	if (bye || !memcmp(peer, d->cl->cfg.self, 16))
		return;
	shoal_cluster_event ev;
	memset(&ev, 0, sizeof ev);
	ev.end = SHOAL_CLUSTER_EV_PEER_GONE;
	memcpy(ev.peer, peer, 16);
	ev.inc = inc;
	snprintf(ev.why, sizeof ev.why, "%.199s", why);
	shoal_cluster_event_push(d->cl, &ev);
}

/* Out-link i goes (it broke, or its peer said goodbye). */
static void shoal_cluster_out_drop(shoal_cluster_dt *d, size_t i)
{
	char why[160];
	snprintf(why, sizeof why, "our data link to it broke: %.120s",
	         shoal_xfer_link_status(d->out[i].k));
	shoal_cluster_link_broke(d, d->out[i].peer, d->out[i].inc, d->out[i].bye, why);
	shoal_xfer_link_free(d->out[i].k);
	d->out[i] = d->out[--d->n_out];
}

shoal_xfer_link *shoal_cluster__link(void *ctx, const uint8_t peer[16])
{
	shoal_cluster_lctx *lc = ctx;
	shoal_cluster_dt *d = lc->cl->dt; /* link callbacks run on the data thread */
	if (!d || !d->as)
		return NULL;
	for (size_t i = 0; i < d->n_out; i++)
		if (d->out[i].role == lc->role && !memcmp(d->out[i].peer, peer, 16)) {
			if (shoal_xfer_link_is_open(d->out[i].k))
				return d->out[i].k;
			/* a send failed on it: dial again (the peer may be back) */
			shoal_cluster_out_drop(d, i);
			break;
		}
	if (d->n_out >= SHOAL_CLUSTER_LINKS)
		return NULL;
	const shoal_cluster_ep *ep = shoal_cluster_ep_of(d, peer);
	char hex[33], why[256] = "";
	shoal_hex_encode(peer, 16, hex);
	if (!ep) {
		SHOAL_LOG_W("cluster", "no data endpoint known for peer %.8s", hex);
		return NULL;
	}
	uint8_t tok[33];
	shoal_cluster__token(lc->cl, lc->cl->cfg.self, d->as->digest, lc->role, tok);
	shoal_xfer_link *k = NULL;
	shoal_err e = shoal_xfer_link_connect(&lc->cl->xcfg, ep->host, ep->port, tok, sizeof tok,
	                                      &k, why, sizeof why);
	if (e != SHOAL_OK) {
		SHOAL_LOG_W("cluster", "data link to %.8s at %s:%u: %s", hex, ep->host,
		            (unsigned)ep->port, why);
		if (e == SHOAL_ERR_CLOSED) { /* nothing listens: that incarnation is gone */
			char w[200];
			snprintf(w, sizeof w, "nothing listens at its data port: %.150s", why);
			shoal_cluster_link_broke(d, peer, ep->inc, false, w);
		}
		return NULL;
	}
	shoal_xfer_link_set_plan(k, d->as->digest, d->as->epoch);
	SHOAL_LOG_I("cluster", "data link to %.8s (%s): %s", hex,
	            lc->role == SHOAL_CLUSTER_ROLE_OWNER    ? "results"
	            : lc->role == SHOAL_CLUSTER_ROLE_TENSOR ? "tensor slices"
	                                                    : "stage",
	            shoal_xfer_link_status(k));
	memcpy(d->out[d->n_out].peer, peer, 16);
	d->out[d->n_out].role = lc->role;
	d->out[d->n_out].inc = ep->inc;
	d->out[d->n_out].bye = false;
	d->out[d->n_out].k = k;
	d->n_out++;
	/* for `shoal status`: one transport line per peer we send to */
	pthread_mutex_lock(&lc->cl->mu);
	size_t j = 0;
	while (j < lc->cl->n_link_status && memcmp(lc->cl->link_peer[j], peer, 16))
		j++;
	if (j < SHOAL_CLUSTER_MAX_PEERS) {
		memcpy(lc->cl->link_peer[j], peer, 16);
		snprintf(lc->cl->link_status[j], sizeof lc->cl->link_status[j], "%s",
		         shoal_xfer_link_status(k));
		if (j == lc->cl->n_link_status)
			lc->cl->n_link_status++;
	}
	pthread_mutex_unlock(&lc->cl->mu);
	return k;
}

shoal_xfer_link *shoal_cluster__no_link(void *ctx, const uint8_t peer[16])
{
	(void)ctx;
	(void)peer;
	return NULL;
}

/* Take the links the accept thread accepted. Data thread. */
static void shoal_cluster_adopt(shoal_cluster_dt *d)
{
	shoal_cluster *cl = d->cl;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_acc; i++) {
		if (d->as && d->n_in < SHOAL_CLUSTER_LINKS) {
			shoal_xfer_link_set_plan(cl->acc[i], d->as->digest, d->as->epoch);
			d->in[d->n_in].k = cl->acc[i];
			d->in[d->n_in].role = cl->acc_role[i];
			shoal_xfer_link_peer(cl->acc[i], d->in[d->n_in].peer);
			const shoal_cluster_ep *ep = shoal_cluster_ep_of(d, d->in[d->n_in].peer);
			d->in[d->n_in].inc = ep ? ep->inc : 0;
			d->in[d->n_in].bye = false;
			d->n_in++;
		} else {
			shoal_xfer_link_free(cl->acc[i]);
		}
	}
	cl->n_acc = 0;
	pthread_mutex_unlock(&cl->mu);
}

shoal_xfer_link *shoal_cluster__tensor_in(void *ctx, const uint8_t peer[16])
{
	shoal_cluster_dt *d = ((shoal_cluster *)ctx)->dt;
	for (int pass = 0; d && pass < 2; pass++) {
		for (size_t i = 0; i < d->n_in; i++)
			if (d->in[i].role == SHOAL_CLUSTER_ROLE_TENSOR &&
			    !memcmp(d->in[i].peer, peer, 16))
				return d->in[i].k;
		if (!pass) /* the member dialled us while our stage ran */
			shoal_cluster_adopt(d);
	}
	return NULL;
}

/* Every link goes, each with a goodbye: the far side must not take our
 * plan change (or our exit) for a death. */
static void shoal_cluster_links_close(shoal_cluster_dt *d, const char *why)
{
	for (size_t i = 0; i < d->n_out; i++) {
		shoal_xfer_link_bye(d->out[i].k, why);
		shoal_xfer_link_free(d->out[i].k);
	}
	for (size_t i = 0; i < d->n_in; i++) {
		shoal_xfer_link_bye(d->in[i].k, why);
		shoal_xfer_link_free(d->in[i].k);
	}
	d->n_out = d->n_in = 0;
	pthread_mutex_lock(&d->cl->mu);
	d->cl->n_link_status = 0;
	pthread_mutex_unlock(&d->cl->mu);
}

/* -------------------------------------------------------- the accept thread */

static void *shoal_cluster_accept_main(void *arg)
{
	shoal_cluster *cl = arg;
	shoal_thread_name("shoal-accept");
	for (;;) {
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		pthread_mutex_unlock(&cl->mu);
		if (stop)
			break;
		shoal_xfer_link *k = NULL;
		char why[256] = "";
		shoal_err e = shoal_xfer_listener_accept(cl->listener, 200, &k, why, sizeof why);
		if (e == SHOAL_ERR_TIMEOUT)
			continue;
		if (e != SHOAL_OK) {
			SHOAL_LOG_D("cluster", "data accept: %s", why);
			continue;
		}
		if (cl->admit_role == SHOAL_CLUSTER_ROLE_WEIGHTS) {
			shoal_weights_server_add(cl->wserve, k);
			continue;
		}
		bool experts = cl->admit_role == SHOAL_CLUSTER_ROLE_EXPERTS;
		pthread_mutex_lock(&cl->mu);
		if (experts && cl->n_xacc < SHOAL_CLUSTER_LINKS) {
			cl->xacc[cl->n_xacc++] = k;
			k = NULL;
		} else if (!experts && cl->n_acc < SHOAL_CLUSTER_LINKS) {
			cl->acc[cl->n_acc] = k;
			cl->acc_role[cl->n_acc] = cl->admit_role;
			cl->n_acc++;
			k = NULL;
		}
		pthread_mutex_unlock(&cl->mu);
		shoal_xfer_link_free(k);
		if (experts)
			shoal_cluster_xwake(cl);
		else
			shoal_cluster__wake(cl);
	}
	return NULL;
}

/* ------------------------------------------------------------------- events */

/* Queue an event for the node thread; waits while the ring is full (the
 * node thread drains it every base period). */
static void shoal_cluster_event_push(shoal_cluster *cl, const shoal_cluster_event *ev)
{
	pthread_mutex_lock(&cl->mu);
	while (cl->ev_n == SHOAL_CLUSTER_EVENTS && !cl->stop)
		pthread_cond_wait(&cl->cv, &cl->mu);
	if (!cl->stop) {
		cl->ev[(cl->ev_head + cl->ev_n) % SHOAL_CLUSTER_EVENTS] = *ev;
		cl->ev_n++;
	}
	pthread_mutex_unlock(&cl->mu);
	shoal_cluster_poke(cl->evfd[1], "event pipe");
}

static void shoal_cluster_end_run(shoal_cluster *cl, uint32_t run, shoal_err err, bool retry,
                                  const char *why)
{
	shoal_cluster_event ev;
	memset(&ev, 0, sizeof ev);
	ev.run = run;
	ev.end = 1;
	ev.err = err;
	ev.retry = retry;
	snprintf(ev.why, sizeof ev.why, "%.199s", why ? why : "");
	cl->runs[run].ended = true;
	shoal_cluster_event_push(cl, &ev);
}

typedef struct shoal_cluster_tokctx {
	shoal_cluster *cl;
	uint32_t run;
} shoal_cluster_tokctx;

static int shoal_cluster_on_token(void *ctx, const shoal_dist_token *t)
{
	shoal_cluster_tokctx *tc = ctx;
	shoal_cluster *cl = tc->cl;
	shoal_cluster_run *r = &cl->runs[tc->run];
	r->last_us = shoal_cluster_data_now_us();
	if (t->step != r->n_gen || r->n_gen >= r->max_tokens) { /* cannot be: the owner's sequence */
		SHOAL_LOG_E("cluster", "run %u: token of step %u after %u tokens: ended", tc->run,
		            t->step, r->n_gen);
		return 1;
	}
	r->prompt[r->n_prompt + r->n_gen++] = t->id; /* the history a replay feeds */
	if (r->paused_us) {
		SHOAL_LOG_I("cluster", "run %u: token %u streams %llu ms after the pause (replay %u)",
		            tc->run, t->step,
		            (unsigned long long)((r->last_us - r->paused_us) / 1000u), r->replays);
		r->paused_us = 0;
	}
	shoal_cluster_event ev;
	ev.run = tc->run;
	ev.end = 0;
	ev.err = SHOAL_OK;
	ev.id = t->id;
	ev.lp = t->logprob;
	ev.n_top = t->n_top < SHOAL_DIST_MAX_LOGPROBS ? t->n_top : SHOAL_DIST_MAX_LOGPROBS;
	memcpy(ev.top_ids, t->top_ids, ev.n_top * sizeof *ev.top_ids);
	memcpy(ev.top_lps, t->top_lps, ev.n_top * sizeof *ev.top_lps);
	ev.why[0] = '\0';
	shoal_cluster_event_push(cl, &ev);
	return 0;
}

/* --------------------------------------------------------------- the thread */

/* Run i goes back to the queue with its history, to be replayed (after
 * `delay_us`) on the plan that is servable then; it waits at most
 * SHOAL_CLUSTER_WAIT_MS from its first pause. Data thread. */
static void shoal_cluster_pause(shoal_cluster *cl, uint32_t i, uint64_t now, uint64_t delay_us,
                                const char *why)
{
	shoal_cluster_run *r = &cl->runs[i];
	pthread_mutex_lock(&cl->mu);
	r->state = SHOAL_CLUSTER_RUN_QUEUED;
	r->not_before_us = now + delay_us;
	pthread_mutex_unlock(&cl->mu);
	if (!r->paused_us) {
		r->paused_us = now;
		r->deadline_us = now + SHOAL_CLUSTER_WAIT_MS * 1000u;
		SHOAL_LOG_I("cluster", "run %u paused after %u token(s): %s", i, r->n_gen, why);
	}
}

/* Take a new assignment: the old plan's links, stage and owner go. Runs
 * in flight pause: each goes back to the queue with its history (prompt
 * and the tokens streamed), which the next servable plan replays as a
 * prefill before the run goes on (DESIGN section 5). */
static void shoal_cluster_take_assign(shoal_cluster_dt *d, shoal_cluster_assign *a)
{
	shoal_cluster *cl = d->cl;
	uint64_t now = shoal_cluster_data_now_us();
	shoal_cluster_links_close(d, "the plan changed");
	shoal_dist_owner_free(d->owner);
	d->owner = NULL;
	d->live = 0;
	for (uint32_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++) {
		shoal_cluster_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool live = r->state == SHOAL_CLUSTER_RUN_STARTED && !r->ended;
		pthread_mutex_unlock(&cl->mu);
		if (live)
			shoal_cluster_pause(cl, i, now, 0, "the plan changed");
	}
	shoal_cluster__free_assign(d->as);
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
	shoal_cluster_xwake(cl);
	shoal_dist_owner_config oc;
	memset(&oc, 0, sizeof oc);
	memcpy(oc.self, cl->cfg.self, 16);
	memcpy(oc.first, a->first, 16);
	memcpy(oc.digest, a->digest, 32);
	oc.epoch = a->epoch;
	oc.max_sessions = a->sessions;
	oc.max_rows = SHOAL_CLUSTER_MAX_ROWS;
	oc.link = shoal_cluster__link;
	oc.link_ctx = &cl->lctx_stage;
	oc.timeout_ms = (int)SHOAL_CLUSTER_SILENCE_MS / 3;
	char why[256] = "";
	if (shoal_dist_owner_new(&oc, &d->owner, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_W("cluster", "cannot make the session owner: %s", why);
}

static void shoal_cluster_dispatch(shoal_cluster_dt *d, shoal_xfer_link *k, int role,
                                   const shoal_xfer_frame *f)
{
	char why[256] = "";
	shoal_err e = SHOAL_OK;
	const shoal_cluster_assign *a = d->as;
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
	} else if (role == SHOAL_CLUSTER_ROLE_OWNER) {
		if (d->owner)
			e = shoal_dist_owner_handle(d->owner, k, f, why, sizeof why);
	} else if (a && a->stage) {
		/* joins the pending batch; the data thread flushes after draining */
		e = shoal_dist_stage_take(a->stage, k, f, why, sizeof why);
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
static bool shoal_cluster_drain_link(shoal_cluster_dt *d, shoal_xfer_link *k, int role, bool *bye)
{
	shoal_xfer_frame f;
	char why[256] = "";
	shoal_err e;
	while ((e = shoal_xfer_link_recv(k, 0, &f, why, sizeof why)) != SHOAL_ERR_TIMEOUT) {
		if (e == SHOAL_OK) {
			if (f.hdr.kind == SHOAL_XFER_KIND_ERROR && f.hdr.n_aux == SHOAL_ERR_CLOSED)
				*bye = true;
			d->frame_us = shoal_cluster_data_now_us();
			shoal_cluster_dispatch(d, k, role, &f);
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

static void shoal_cluster_start_runs(shoal_cluster_dt *d, shoal_cluster_tokctx *tcs)
{
	shoal_cluster *cl = d->cl;
	uint64_t now = shoal_cluster_data_now_us();
	for (uint32_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++) {
		shoal_cluster_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool queued = r->state == SHOAL_CLUSTER_RUN_QUEUED && now >= r->not_before_us;
		bool cancel = r->cancel;
		bool servable =
		    cl->shared_servable && d->as && !memcmp(cl->shared_digest, d->as->digest, 32);
		bool go = queued && !cancel && servable && d->owner && d->live < d->as->sessions;
		if (queued && (go || cancel))
			r->state = SHOAL_CLUSTER_RUN_STARTED;
		char wait_why[256];
		snprintf(wait_why, sizeof wait_why, "%s", cl->shared_why);
		bool infeasible = cl->shared_infeasible;
		pthread_mutex_unlock(&cl->mu);
		if (!queued)
			continue;
		if (cancel) {
			shoal_cluster_end_run(cl, i, SHOAL_ERR_CLOSED, false, "the client went away");
			continue;
		}
		if (!go && !servable && infeasible && !r->paused_us) {
			/* a new request: no point in waiting for memory to come */
			pthread_mutex_lock(&cl->mu);
			r->state = SHOAL_CLUSTER_RUN_STARTED;
			pthread_mutex_unlock(&cl->mu);
			shoal_cluster_end_run(cl, i, SHOAL_ERR_INFEASIBLE, false, wait_why);
			continue;
		}
		if (!go) {
			/* a full queue waits for sessions without a deadline; a plan
			 * that is not servable, or a paused run, at most
			 * SHOAL_CLUSTER_WAIT_MS */
			if ((!servable || r->paused_us) && now > r->deadline_us) {
				char why[320];
				snprintf(why, sizeof why, "%s: no servable plan for %u s: %.200s",
				         r->n_gen ? "paused by a plan change" : "waiting",
				         SHOAL_CLUSTER_WAIT_MS / 1000u, wait_why);
				pthread_mutex_lock(&cl->mu);
				r->state = SHOAL_CLUSTER_RUN_STARTED;
				pthread_mutex_unlock(&cl->mu);
				shoal_cluster_end_run(cl, i, SHOAL_ERR_TIMEOUT, !r->n_gen, why);
			}
			continue;
		}
		r->ended = false;
		r->last_us = now;
		if (!r->paused_us) /* bounds BUSY retries */
			r->deadline_us = now + SHOAL_CLUSTER_WAIT_MS * 1000u;
		char why[256] = "";
		tcs[i] = (shoal_cluster_tokctx){cl, i};
		shoal_dist_request req = {.prompt = r->prompt,
		                          .n_prompt = r->n_prompt + r->n_gen,
		                          .max_tokens = r->max_tokens - r->n_gen,
		                          .logprobs = r->logprobs,
		                          .no_logprob = r->no_logprob,
		                          .first_step = r->n_gen,
		                          .sampler = r->sp,
		                          .eog = cl->tok,
		                          .on_token = shoal_cluster_on_token,
		                          .ctx = &tcs[i]};
		if (r->paused_us) {
			r->replays++;
			SHOAL_LOG_I("cluster", "run %u: replaying %u prompt + %u generated token(s)", i,
			            r->n_prompt, r->n_gen);
		}
		shoal_err e = shoal_dist_owner_start(d->owner, &req, &r->sid, why, sizeof why);
		if (e != SHOAL_OK)
			shoal_cluster_end_run(cl, i, e, false, why[0] ? why : shoal_strerror(e));
		else
			d->live++;
	}
}

static void shoal_cluster_check_runs(shoal_cluster_dt *d)
{
	shoal_cluster *cl = d->cl;
	uint64_t now = shoal_cluster_data_now_us();
	for (uint32_t i = 0; i < SHOAL_CLUSTER_MAX_RUNS; i++) {
		shoal_cluster_run *r = &cl->runs[i];
		pthread_mutex_lock(&cl->mu);
		bool started = r->state == SHOAL_CLUSTER_RUN_STARTED;
		bool cancel = r->cancel, noplan = cl->shared_noplan;
		pthread_mutex_unlock(&cl->mu);
		if (!started || r->ended || !d->owner)
			continue;
		shoal_err res = SHOAL_OK;
		char why[256] = "";
		if (noplan && !cancel) {
			/* the plan is gone (too few peers left): wait for one, as a
			 * plan change would, and replay on it */
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			shoal_cluster_pause(cl, i, now, 0, "no plan serves the model now");
		} else if (cancel) {
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			shoal_cluster_end_run(cl, i, SHOAL_ERR_CLOSED, false, "the client went away");
		} else if (shoal_dist_owner_done(d->owner, r->sid, &res, why, sizeof why)) {
			d->live--;
			if (res == SHOAL_ERR_BUSY && now < r->deadline_us) {
				/* a stage had no free session (other owners hold them):
				 * wait in the queue and try again */
				pthread_mutex_lock(&cl->mu);
				r->state = SHOAL_CLUSTER_RUN_QUEUED;
				r->not_before_us = now + SHOAL_CLUSTER_BUSY_RETRY_MS * 1000u;
				pthread_mutex_unlock(&cl->mu);
				continue;
			}
			if ((res == SHOAL_ERR_CLOSED || res == SHOAL_ERR_IO ||
			     res == SHOAL_ERR_NOTFOUND) &&
			    (!r->paused_us || now < r->deadline_us)) {
				/* our link to stage 0 broke: the peer died or restarts;
				 * replay on the plan that serves next (a new one once
				 * the death is known, or this one with a new link) */
				shoal_cluster_pause(cl, i, now, 100000u, why);
				continue;
			}
			shoal_cluster_end_run(cl, i, res, false, why);
		} else if (now - r->last_us > SHOAL_CLUSTER_SILENCE_MS * 1000u) {
			/* the slot is freed and CLOSE sent: nothing leaks */
			shoal_dist_owner_cancel(d->owner, r->sid);
			d->live--;
			snprintf(why, sizeof why, "no token for %u s while the plan stayed servable",
			         SHOAL_CLUSTER_SILENCE_MS / 1000u);
			shoal_cluster_end_run(cl, i, SHOAL_ERR_TIMEOUT, false, why);
		}
	}
}

/* Metrics snapshots for `shoal status` (the node thread renders them). */
static void shoal_cluster_publish(shoal_cluster_dt *d)
{
	shoal_dist_stage_metrics sm;
	shoal_dist_owner_metrics om;
	memset(&sm, 0, sizeof sm);
	memset(&om, 0, sizeof om);
	if (d->as && d->as->stage)
		shoal_dist_stage_metrics_get(d->as->stage, &sm);
	if (d->owner)
		shoal_dist_owner_metrics_get(d->owner, &om);
	pthread_mutex_lock(&d->cl->mu);
	d->cl->met_stage = sm;
	d->cl->met_owner = om;
	pthread_mutex_unlock(&d->cl->mu);
}

/* Wait for a frame or a wake-up. A thread that blocks in poll(2) is woken
 * by the frame only after its core left idle: on the 2-vCPU machine of
 * tests/bench/dist_bench.sh ~40-50 us a wake-up (perf sched), twice a
 * token with 2 stages. So while a frame is expected soon (a session of
 * ours generates, or a frame came within SHOAL_CLUSTER_HOP_ACTIVE_MS) and
 * the recent waits were shorter than spin_us, poll is called without a
 * timeout until a descriptor is ready or spin_us passed, then it blocks.
 * Between two polls the thread yields: a thread woken on its core (the
 * node's, ZeroMQ's, a client's) runs at once instead of taking the core
 * for a time slice later. Waits longer than the spin (a large model's
 * stage) block at once: the wake-up is then a small part of them. A poll
 * that returns SHOAL_CLUSTER_HOP_GAP_US after it was called means the
 * thread was preempted (more busy threads than cores): spinning then only
 * slows the peer that computes, so it stops for
 * SHOAL_CLUSTER_HOP_BACKOFF_MS. (The time given away in sched_yield is not
 * counted: a busy thread on the same core gets it back at each yield.) dist_bench, austen, 5 rounds, spin 0
 * against 2000 us: 134 -> 90 us a hop with 2 stages, 85 -> 52 with 3. */
static void shoal_cluster_wait(shoal_cluster_dt *d, struct pollfd *pf, int np)
{
	const uint32_t spin_us = d->cl->cfg.hop_spin_us;
	uint64_t t0 = shoal_cluster_data_now_us(), t = t0;
	bool active = d->live || t0 - d->frame_us <= SHOAL_CLUSTER_HOP_ACTIVE_MS * 1000u;
	int ready = 0;
	if (active && spin_us && t0 >= d->spin_off_us && d->wait_us <= spin_us) {
		uint64_t end = t0 + spin_us;
		while (!(ready = poll(pf, (nfds_t)np, 0) > 0)) {
			uint64_t u = shoal_cluster_data_now_us();
			if (u - t > SHOAL_CLUSTER_HOP_GAP_US) {
				d->spin_off_us = u + SHOAL_CLUSTER_HOP_BACKOFF_MS * 1000u;
				SHOAL_LOG_D("cluster", "spin: off the core for %llu us; blocking for %u ms",
				            (unsigned long long)(u - t), SHOAL_CLUSTER_HOP_BACKOFF_MS);
				break;
			}
			if (u >= end)
				break;
			sched_yield(); /* a thread woken on this core runs first */
			t = shoal_cluster_data_now_us();
		}
	}
	if (!ready)
		ready = poll(pf, (nfds_t)np, 50) > 0;
	if (active && ready) { /* the average of the latest ~4 */
		uint64_t w = shoal_cluster_data_now_us() - t0;
		d->wait_us = d->wait_us ? (3 * d->wait_us + w) / 4 : w;
	}
}

static void *shoal_cluster_data_main(void *arg)
{
	shoal_cluster *cl = arg;
	shoal_cluster_dt *d = calloc(1, sizeof *d);
	shoal_cluster_tokctx tcs[SHOAL_CLUSTER_MAX_RUNS];
	if (!d) {
		SHOAL_LOG_E("cluster", "data thread: out of memory");
		return NULL;
	}
	shoal_thread_compute(); /* its wake-up is the pipeline's critical path */
	shoal_thread_name("shoal-data");
	d->cl = cl;
	cl->dt = d;
	for (;;) {
		shoal_cluster_assign *na = NULL;
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
			shoal_cluster_take_assign(d, na);
		if (eps_new && d->as && d->as->stage) {
			/* the sessions of owners that left the view are freed */
			uint8_t ids[SHOAL_CLUSTER_MAX_PEERS][16];
			for (size_t i = 0; i < d->n_eps; i++)
				memcpy(ids[i], d->eps[i].id, 16);
			shoal_dist_stage_keep_owners(d->as->stage, (const uint8_t(*)[16])ids, d->n_eps);
		}
		shoal_cluster_adopt(d);
		shoal_cluster_start_runs(d, tcs);
		/* wait for frames or a wake-up */
		struct pollfd pf[1 + 3 * SHOAL_CLUSTER_LINKS];
		int np = 0;
		pf[np].fd = cl->wake[0];
		pf[np].events = POLLIN;
		np++;
		/* (a group member's slices are read in its stage's exchange) */
		for (size_t i = 0; i < d->n_in; i++)
			if (d->in[i].role != SHOAL_CLUSTER_ROLE_TENSOR)
				np += shoal_xfer_link_pollfds(d->in[i].k, pf + np, 3);
		/* links we send on: a peer's goodbye or a broken connection shows
		 * there first (EXPERTS links are read by the stage's collect) */
		for (size_t i = 0; i < d->n_out; i++)
			if (d->out[i].role != SHOAL_CLUSTER_ROLE_EXPERTS)
				np += shoal_xfer_link_pollfds(d->out[i].k, pf + np, 3);
		shoal_cluster_wait(d, pf, np);
		char drain[64];
		while (read(cl->wake[0], drain, sizeof drain) > 0)
			;
		/* Read every link (cheap: recv with timeout 0). */
		for (size_t i = 0; i < d->n_in;) {
			char why[200];
			if (d->in[i].role == SHOAL_CLUSTER_ROLE_TENSOR ||
			    shoal_cluster_drain_link(d, d->in[i].k, d->in[i].role, &d->in[i].bye)) {
				i++;
				continue;
			}
			snprintf(why, sizeof why, "its data link to us broke: %.120s",
			         shoal_xfer_link_status(d->in[i].k));
			shoal_cluster_link_broke(d, d->in[i].peer, d->in[i].inc, d->in[i].bye, why);
			shoal_xfer_link_free(d->in[i].k);
			d->in[i] = d->in[--d->n_in];
		}
		for (size_t i = 0; i < d->n_out;) {
			if (d->out[i].role == SHOAL_CLUSTER_ROLE_EXPERTS ||
			    shoal_cluster_drain_link(d, d->out[i].k, d->out[i].role, &d->out[i].bye))
				i++;
			else
				shoal_cluster_out_drop(d, i);
		}
		if (d->as && d->as->stage) {
			char why[256] = "";
			if (shoal_dist_stage_flush(d->as->stage, why, sizeof why) != SHOAL_OK)
				SHOAL_LOG_W("cluster", "stage: %s", why);
		}
		shoal_cluster_check_runs(d);
		shoal_cluster_publish(d);
	}
	shoal_cluster_links_close(d, "the node stops");
	shoal_dist_owner_free(d->owner);
	shoal_cluster__free_assign(d->as);
	cl->dt = NULL;
	free(d);
	return NULL;
}

/* --------------------------------------------------------- the expert thread */

/* The expert server and the EXPERTS links: answers each EXPERT_REQ at
 * once, whatever the data thread's stage is doing. */
static void *shoal_cluster_experts_main(void *arg)
{
	shoal_cluster *cl = arg;
	shoal_dist_stage *xs = NULL;
	shoal_xfer_link *in[SHOAL_CLUSTER_LINKS];
	size_t n_in = 0;
	uint8_t digest[32] = {0};
	uint64_t epoch = 0;
	shoal_thread_compute(); /* a stage elsewhere waits on its answers */
	shoal_thread_name("shoal-experts");
	for (;;) {
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		bool swap = cl->x_pending_set;
		shoal_dist_stage *nx = cl->x_pending;
		cl->x_pending = NULL;
		cl->x_pending_set = false;
		pthread_mutex_unlock(&cl->mu);
		if (stop) {
			shoal_dist_stage_free(nx);
			break;
		}
		if (swap) {
			shoal_dist_stage_free(xs);
			xs = nx;
			if (xs) {
				shoal_dist_stage_plan(xs, digest, &epoch);
				/* links already here may carry the new plan's requests */
				for (size_t i = 0; i < n_in; i++)
					shoal_xfer_link_set_plan(in[i], digest, epoch);
			}
		}
		pthread_mutex_lock(&cl->mu);
		for (size_t i = 0; i < cl->n_xacc; i++) {
			if (n_in < SHOAL_CLUSTER_LINKS) {
				shoal_xfer_link_set_plan(cl->xacc[i], digest, epoch);
				in[n_in++] = cl->xacc[i];
			} else {
				shoal_xfer_link_free(cl->xacc[i]);
			}
		}
		cl->n_xacc = 0;
		pthread_mutex_unlock(&cl->mu);
		struct pollfd pf[1 + 3 * SHOAL_CLUSTER_LINKS];
		int np = 0;
		pf[np++] = (struct pollfd){.fd = cl->xwake[0], .events = POLLIN};
		for (size_t i = 0; i < n_in; i++)
			np += shoal_xfer_link_pollfds(in[i], pf + np, 3);
		poll(pf, (nfds_t)np, 200);
		char drain[64];
		while (read(cl->xwake[0], drain, sizeof drain) > 0)
			;
		for (size_t i = 0; i < n_in;) {
			shoal_xfer_frame f;
			char why[256] = "";
			shoal_err e;
			while ((e = shoal_xfer_link_recv(in[i], 0, &f, why, sizeof why)) == SHOAL_OK ||
			       e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
				if (e != SHOAL_OK)
					SHOAL_LOG_W("cluster", "expert frame dropped: %s", why);
				else if (!xs)
					SHOAL_LOG_W("cluster", "an expert request, but no experts here");
				else if (shoal_dist_stage_handle(xs, in[i], &f, why, sizeof why))
					SHOAL_LOG_W("cluster", "expert server: %s", why);
			}
			if (e != SHOAL_ERR_TIMEOUT) {
				SHOAL_LOG_I("cluster", "expert link closed: %s", why);
				shoal_xfer_link_free(in[i]);
				in[i] = in[--n_in];
			} else {
				i++;
			}
		}
		shoal_dist_stage_metrics xm;
		memset(&xm, 0, sizeof xm);
		if (xs)
			shoal_dist_stage_metrics_get(xs, &xm);
		pthread_mutex_lock(&cl->mu);
		cl->met_experts = xm;
		cl->have_experts = xs != NULL;
		pthread_mutex_unlock(&cl->mu);
	}
	for (size_t i = 0; i < n_in; i++)
		shoal_xfer_link_free(in[i]);
	shoal_dist_stage_free(xs);
	return NULL;
}

/* --------------------------------------------------------------- start/stop */

shoal_err shoal_cluster__data_start(shoal_cluster *cl, char *why, size_t why_len)
{
	shoal_xfer_config_default(&cl->xcfg);
	memcpy(cl->xcfg.self_id, cl->cfg.self, 16);
	/* peers share cores in a lab: block at once instead of spinning */
	cl->xcfg.spin_us = 0;
	/* one context, PD, pool and CQ per RDMA device for all our links */
	cl->xcfg.rdma = cl->cfg.rdma;
	cl->xcfg.rdma_hub = cl->xcfg.verbs ? shoal_xfer_rdma_hub_new() : NULL;
	shoal_err e = shoal_xfer_listener_new(
	    &cl->xcfg, cl->cfg.data_host ? cl->cfg.data_host : "0.0.0.0", cl->cfg.data_port,
	    shoal_cluster_admit, cl, &cl->listener, why, why_len);
	if (e != SHOAL_OK)
		return e;
	if (pthread_create(&cl->acc_thr, NULL, shoal_cluster_accept_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the accept thread");
	cl->acc_started = true;
	if (pthread_create(&cl->data_thr, NULL, shoal_cluster_data_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the data thread");
	cl->data_started = true;
	if (pthread_create(&cl->x_thr, NULL, shoal_cluster_experts_main, cl) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot start the expert thread");
	cl->x_started = true;
	return SHOAL_OK;
}

void shoal_cluster__data_stop(shoal_cluster *cl)
{
	if (cl->mu_ok) {
		pthread_mutex_lock(&cl->mu);
		cl->stop = 1;
		if (cl->cv_ok)
			pthread_cond_broadcast(&cl->cv);
		pthread_mutex_unlock(&cl->mu);
	}
	if (cl->wake[1] >= 0)
		shoal_cluster__wake(cl);
	if (cl->xwake[1] >= 0)
		shoal_cluster_xwake(cl);
	if (cl->x_started)
		pthread_join(cl->x_thr, NULL);
	if (cl->data_started)
		pthread_join(cl->data_thr, NULL);
	if (cl->acc_started)
		pthread_join(cl->acc_thr, NULL);
	cl->data_started = cl->acc_started = cl->x_started = false;
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

uint16_t shoal_cluster_data_port(const shoal_cluster *cl)
{
	return cl->listener ? shoal_xfer_listener_port(cl->listener) : 0;
}
