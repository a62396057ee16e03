/*
 * runtime/node/serve_part.c: this peer's part of a plan: the tensors it needs,
 * fetched first where the model is a weights cache (weights_fetch.c), then
 * the stage and expert server built from them and handed to the data
 * thread, and readiness announced. Node thread.
 *
 * Divisions: the part's tensors and their fetch; building the assignment.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"

static shoal_err serve_build_assign(shoal_serve *cl, shoal_serve_assign **out, char *why,
                                    size_t why_len);

/* Tensor ix (UINT32_MAX: none) appended to out[n] unless there already or
 * out is full; returns the new count. Each tensor once (a tied head is the
 * embedding): out[cap] has room for every tensor of the file, and a
 * duplicate must not take the place of the last (a one-stage part of a
 * tied model lost its last layer's last tensor so). */
static size_t serve_part_add(uint32_t *out, size_t n, size_t cap, uint32_t ix)
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
 * every member does. Where the plan gives the head peer DeepSeek's MTP
 * layer (a peer of the cluster drafts with it: shoal_plan_mtp), the head
 * peer's part has that layer's tensors too (shoal_nextn_tensors), and the
 * embedding the layer shares; they are fetched and checked like the rest.
 * Returns how many went into out[cap]; *mtp says whether the MTP
 * layer's are among them. */
static size_t serve_part_tensors(const shoal_serve *cl, uint32_t *out, size_t cap, bool *mtp)
{
	*mtp = false;
	const shoal_plan *p = cl->plan;
	const shoal_model *m = cl->model;
	const shoal_gguf_tensor *base = shoal_gguf_tensor_at(m->gguf, 0);
	size_t n = 0;
	long self = -1;
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!memcmp(shoal_plan_peer_at(p, i)->id.b, cl->cfg.self, SHOAL_PEER_ID_LEN))
			self = (long)i;
	if (self < 0)
		return 0;
#define PART_ADD(t) (n = serve_part_add(out, n, cap, (t) ? (uint32_t)((t)-base) : UINT32_MAX))
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
		if (st == ns - 1 && shoal_plan_mtp(p) && m->nextn &&
		    shoal_plan_head_peer(p) == (uint32_t)self) {
			const shoal_gguf_tensor *xt[SHOAL_NEXTN_MAX_TENSORS];
			size_t nx = shoal_nextn_tensors(m, xt);
			for (size_t k = 0; k < nx; k++)
				PART_ADD(xt[k]);
			PART_ADD(m->nextn->embd);
			PART_ADD(m->nextn->head);
			*mtp = true;
		}
		for (uint32_t l = ps->first_layer; l < ps->end_layer && l < m->hp.n_layer; l++) {
			const shoal_layer *y = &m->layers[l];
			const shoal_gguf_tensor *ts[SHOAL_LAYER_MAX_TENSORS];
			size_t nt = shoal_layer_own_tensors(y, ts);
			for (size_t k = 0; k < nt; k++)
				PART_ADD(ts[k]);
			const shoal_gguf_tensor *xs[SHOAL_LAYER_MAX_EXPERT_TENSORS];
			size_t nx = shoal_layer_expert_tensors(y, xs);
			for (size_t k = 0; k < nx; k++)
				PART_ADD(xs[k]);
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
		const shoal_gguf_tensor *xs[SHOAL_LAYER_MAX_EXPERT_TENSORS];
		size_t nx = mine ? shoal_layer_expert_tensors(&m->layers[l], xs) : 0;
		for (size_t k = 0; k < nx; k++)
			PART_ADD(xs[k]);
	}
	if (n)
		PART_ADD(m->rope_freqs);
#undef PART_ADD
	return n;
}

/* With a weights cache: true while tensors of our part are missing; then a
 * fetch runs (or is started here from the plan's other peers, or waits to
 * be tried again after a failure) and ready_why says so. */
static bool serve_fetch_wait(shoal_serve *cl)
{
	size_t cap = shoal_gguf_n_tensors(cl->model->gguf);
	uint32_t *need = malloc((cap ? cap : 1) * sizeof *need);
	if (!need) {
		snprintf(cl->ready_why, sizeof cl->ready_why, "out of memory");
		return true;
	}
	bool mtp;
	size_t nn = serve_part_tensors(cl, need, cap, &mtp), missing = 0;
	const char *with = mtp ? " (with the MTP layer's)" : "";
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
		SHOAL_LOG_I("weights", "our part: %zu tensor(s)%s, %.1f MiB, all in the cache%s",
		            nn, with, (double)bytes / 1048576.0,
		            pr.fetched ? "" : " (cache hit: nothing fetched)");
		return false;
	}
	uint64_t now = shoal_clock_now_us();
	if (!pr.running && pr.failed && !cl->fetch_failed_seen) {
		cl->fetch_failed_seen = true;
		cl->fetch_retry_us = now + 1000000u; /* gossip settles meanwhile */
		snprintf(cl->ready_why, sizeof cl->ready_why, "fetching weights failed: %.*s",
		         SHOAL_WHY_QUOTE(sizeof cl->ready_why, 32), pr.why);
	}
	if (pr.running || now < cl->fetch_retry_us) {
		free(need);
		return true;
	}
	shoal_weights_src src[SHOAL_SERVE_MAX_PEERS];
	size_t ns = 0;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_eps; i++) {
		if (!memcmp(cl->eps[i].id, cl->cfg.self, SHOAL_PEER_ID_LEN))
			continue;
		memcpy(src[ns].id, cl->eps[i].id, SHOAL_PEER_ID_LEN);
		snprintf(src[ns].host, sizeof src[ns].host, "%s", cl->eps[i].host);
		src[ns].port = cl->eps[i].port;
		char hex[SHOAL_PEER_ID_HEX_LEN];
		shoal_hex_encode(cl->eps[i].id, 16, hex);
		snprintf(src[ns].name, sizeof src[ns].name, "%.8s", hex);
		for (size_t k = 0; cl->plan && k < shoal_plan_n_peers(cl->plan); k++)
			if (!memcmp(shoal_plan_peer_at(cl->plan, k)->id.b, cl->eps[i].id,
			            SHOAL_PEER_ID_LEN))
				snprintf(src[ns].name, sizeof src[ns].name, "%s",
				         shoal_plan_peer_at(cl->plan, k)->name);
		ns++;
	}
	pthread_mutex_unlock(&cl->mu);
	if (!ns) {
		snprintf(cl->ready_why, sizeof cl->ready_why,
		         "%zu tensor(s) of our part missing and no peer to fetch them from",
		         missing);
	} else if (shoal_weights_start(cl->wf, src, ns, cl->wc, need, missing) == SHOAL_OK) {
		cl->fetch_failed_seen = false;
		snprintf(cl->ready_why, sizeof cl->ready_why,
		         "fetching %zu tensor(s) of our part (%.1f MiB) from the peers", missing,
		         (double)miss_bytes / 1048576.0);
		SHOAL_LOG_I("weights",
		            "our part: %zu tensor(s)%s, %.1f MiB; %zu missing (%.1f MiB)", nn, with,
		            (double)bytes / 1048576.0, missing, (double)miss_bytes / 1048576.0);
	}
	free(need);
	return true;
}

/* Our part of cl->plan, once per plan: with a weights cache, only when its
 * tensors are all there (else a fetch runs and this is tried again each
 * update); then built, handed to the data thread and announced. Returns 1
 * when readiness changed. */
int serve__take_part(shoal_serve *cl)
{
	if (cl->part_taken || !cl->plan || (cl->wc && serve_fetch_wait(cl)))
		return 0;
	cl->part_taken = true;
	char dh[65], why[SHOAL_WHY_LEN] = "";
	shoal_digest_hex(shoal_plan_digest(cl->plan), dh);
	shoal_serve_assign *a = NULL;
	shoal_err e = serve_build_assign(cl, &a, why, sizeof why);
	if (e != SHOAL_OK) {
		SHOAL_LOG_W("cluster", "cannot load our part of plan %.16s: %s", dh, why);
		snprintf(cl->ready_why, sizeof cl->ready_why, "%s", why);
		cl->ready_epoch = 0;
		memset(cl->ready_digest, 0, SHOAL_DIGEST_BYTES);
		return 1;
	}
	pthread_mutex_lock(&cl->mu);
	serve__free_assign(cl->pending);
	cl->pending = a;
	cl->pending_set = true;
	cl->shared_servable = false;
	memcpy(cl->shared_digest, shoal_plan_digest(cl->plan), SHOAL_DIGEST_BYTES);
	cl->shared_epoch = shoal_plan_epoch(cl->plan);
	pthread_mutex_unlock(&cl->mu);
	serve__wake(cl);
	cl->ready_why[0] = '\0';
	memcpy(cl->ready_digest, shoal_plan_digest(cl->plan), SHOAL_DIGEST_BYTES);
	cl->ready_epoch = shoal_plan_epoch(cl->plan);
	SHOAL_LOG_I("cluster", "ready for digest %.16s (epoch %llu)", dh,
	            (unsigned long long)cl->ready_epoch);
	return 1;
}

/* -------------------------------------------------- building the assignment */

/* Stage config c of member `me` of a tensor group mem[n] (plan order):
 * member 0 is the entry (the plan's stage peer: the previous stage and the
 * owners send to it, it relays); in the last stage every member computes
 * its share of the head and the head peer gathers the logits and samples
 * (invariant 10), the entry passes hidden states on in any other (dist.h
 * invariant 9). */
static void serve_group_config(shoal_serve *cl, const shoal_plan *p, const shoal_plan_member *mem,
                               size_t n, size_t me, shoal_dist_stage_config *c)
{
	bool last = c->has_head;
	c->tp_n = (uint32_t)n;
	c->tp_me = (uint32_t)me;
	for (size_t j = 0; j < n; j++) {
		c->tp_w[j] = mem[j].weight;
		memcpy(c->tp_peer[j], shoal_plan_peer_at(p, mem[j].peer)->id.b, SHOAL_PEER_ID_LEN);
	}
	c->has_head = last && mem[me].peer == shoal_plan_head_peer(p);
	c->tp_out = last ? c->has_head : me == 0;
	c->tp_head = last;
	for (size_t j = 0; last && j < n; j++)
		if (mem[j].peer == shoal_plan_head_peer(p))
			c->tp_root = (uint32_t)j;
	c->tp_relay = serve__link;
	c->tp_relay_ctx = &cl->lctx_stage;
	c->tp_send = serve__link;
	c->tp_send_ctx = &cl->lctx_tensor;
	c->tp_recv = serve__tensor_in;
	c->tp_recv_ctx = cl;
	c->tp_spin_us = SHOAL_SERVE_TP_SPIN_US;
	const char *env = getenv("SHOAL_TP_SPIN_US"); /* for tests/bench/tp_bench.sh */
	if (env && *env)
		c->tp_spin_us = (uint32_t)strtoul(env, NULL, 10);
}

/* With a weights cache: whether tensor t of the model (the cache's file) is
 * complete and verified there (the engine refuses one that is not). */
static bool serve_tensor_held(void *ctx, const shoal_gguf_tensor *t)
{
	shoal_serve *cl = ctx;
	const shoal_gguf *g = cl->model->gguf;
	const shoal_gguf_tensor *base = shoal_gguf_tensor_at(g, 0);
	size_t n = shoal_gguf_n_tensors(g);
	if (!base || t < base || t >= base + n)
		return false;
	return shoal_wcache_has(cl->wc, (size_t)(t - base));
}

/* What a stage and an expert server of assignment a share. */
static void serve_stage_common(shoal_serve *cl, const shoal_serve_assign *a,
                               shoal_dist_stage_config *c)
{
	if (cl->wc) {
		c->tensor_held = serve_tensor_held;
		c->tensor_held_ctx = cl;
	}
	memcpy(c->self, cl->cfg.self, SHOAL_PEER_ID_LEN);
	memcpy(c->digest, a->digest, SHOAL_DIGEST_BYTES);
	c->epoch = a->epoch;
	c->n_threads = cl->cfg.threads ? cl->cfg.threads : 1;
	c->backend = cl->cfg.backend;
	c->n_ctx = cl->pol.ctx;
	c->max_sessions = a->sessions;
	c->max_rows = SHOAL_SERVE_MAX_ROWS;
	c->prefix_bytes = cl->cfg.prefix_bytes;
	memcpy(c->model_id, cl->model_id, SHOAL_MODEL_ID_BYTES);
	c->timeout_ms = (int)SHOAL_SERVE_SILENCE_MS / 3;
}

static shoal_err serve_build_assign(shoal_serve *cl, shoal_serve_assign **out, char *why,
                                    size_t why_len)
{
	const shoal_plan *p = cl->plan;
	const shoal_hparams *hp = &cl->model->hp;
	shoal_err e = SHOAL_OK;
	uint8_t *mask = NULL, *peer = NULL, *xmask = NULL;
	shoal_serve_assign *a = calloc(1, sizeof *a);
	if (!a)
		return SHOAL_ERR_NOMEM;
	memcpy(a->digest, shoal_plan_digest(p), SHOAL_DIGEST_BYTES);
	a->epoch = shoal_plan_epoch(p);
	a->sessions = cl->plan_sessions;
	size_t ns = shoal_plan_n_stages(p);
	memcpy(a->first, shoal_plan_peer_at(p, shoal_plan_stage_at(p, 0)->peer)->id.b,
	       SHOAL_PEER_ID_LEN);
	long self = -1;
	for (size_t i = 0; i < shoal_plan_n_peers(p); i++)
		if (!memcmp(shoal_plan_peer_at(p, i)->id.b, cl->cfg.self, SHOAL_PEER_ID_LEN))
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
					memcpy(peer + k * SHOAL_PEER_ID_LEN,
					       shoal_plan_peer_at(p, own[0])->id.b,
					       SHOAL_PEER_ID_LEN);
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
		sc.tok = cl->tok; /* structured output's token bytes (the last stage) */
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
			serve_group_config(cl, p, mem, n_mem, me, &sc);
		}
		if (!sc.has_head && (size_t)si + 1 < ns)
			memcpy(sc.next,
			       shoal_plan_peer_at(p, shoal_plan_stage_at(p, (size_t)si + 1)->peer)
			           ->id.b,
			       16);
		serve_stage_common(cl, a, &sc);
		/* the plan's device split (scheduler/plan.h): [first, gpu_end) on
		 * our --backend's GPU, the rest on the CPU; none on a GPU: all on
		 * the CPU, whatever --backend says */
		if (st->gpu_end == st->first_layer)
			sc.backend = "cpu";
		else if (st->gpu_end < st->end_layer)
			sc.device_end = st->gpu_end;
		sc.link = serve__link;
		sc.link_ctx = sc.has_head ? &cl->lctx_owner : &cl->lctx_stage;
		sc.expert_link = serve__link;
		sc.expert_link_ctx = &cl->lctx_experts;
		sc.owner_link = serve__link;
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
		serve_stage_common(cl, a, &xc);
		xc.link = serve__no_link; /* it only answers, on the request's link */
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
	serve__free_assign(a);
	return e;
}
