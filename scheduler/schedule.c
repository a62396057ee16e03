/*
 * scheduler/schedule.c: plan = schedule(view, manifest, policy, prev).
 *
 * Part: scheduler/ (pure). The model, in integers (bytes, ns):
 *
 * 1. Stage time on peer p for layers [a, b): per layer, the roofline
 *    max(bytes read / bandwidth, FLOPs / speed), where bytes are the layer's
 *    weights plus its KV cache over the reserved context, FLOPs its matmuls
 *    plus attention over that context; then its routed experts (next item).
 *    Layers run one after the other, so per-layer maxima are summed (a
 *    layer's attention is bandwidth-bound, a big batch's FFN may be
 *    compute-bound: one max over the whole stage would hide that).
 * 2. Experts of a layer: each owner's share of the expected load
 *    (n_expert_used experts per token) at its roofline, plus a round trip
 *    (two hops of one activation row) for owners other than the layer's
 *    peer; owners work in parallel, so the slowest one counts; plus one row's
 *    transfer time per remote owner, as the layer's peer sends the rows one
 *    after another.
 * 3. Each hop between consecutive stages: latency + one activation row at
 *    the link's bandwidth. The head (output norm + matrix) on the last stage.
 * 4. Memory per peer: weights it holds + KV for ctx x sessions tokens of its
 *    layers + the embedding (first stage) and head (last stage; a tied head
 *    counts the shared matrix on both peers, once when they are one peer),
 *    at most its memory less the headroom. When a peer of the view offers
 *    DeepSeek's MTP layer (view.h: mtp) and the manifest has one
 *    (mtp_bytes), the head counts that layer too: its weights, its KV for
 *    ctx x sessions tokens, and the embedding it shares (cost.c: mtp_mem).
 * 4a. A peer with a GPU (view.h: gpu_mem) runs its stage's first layers on
 *    the GPU while their weights, KV and the experts it holds of them fit
 *    the GPU's memory less the headroom, and the rest in host memory on
 *    its CPU: a split inside the peer, like a stage boundary without a
 *    hop. Each part is timed as in 1 with its device's figures (decode
 *    is bound by bytes / that device's read bandwidth, a batch by its
 *    multiply rate); the head runs on the GPU when the last stage is all
 *    there and the head fits beside it. Host memory holds the embedding,
 *    the CPU part and the experts a peer holds for other stages' layers;
 *    a unified GPU's memory is the host's, so there everything counts
 *    against host memory too. A tensor group's member computes on its
 *    GPU when that GPU is unified (its share is in host memory either
 *    way), else on its CPU.
 * 4b. Calibration (view.h): every device's bandwidth and compute count for
 *    their efficiency (the share a layer of the engine really gets, as
 *    measured or taken from published runs); every hop into a stage adds
 *    the receiving peer's hop_ns (its engine's fixed cost per hop: the
 *    transport's stack, waking, dispatch) to the link's latency, and every
 *    collective round of a tensor group adds its slowest member's round_ns
 *    (synchronising, waking, copying the slices in) to the link's latency;
 *    members send at once, so neither grows with the group's size.
 *
 * 5. Tensor groups (tensor.c, only with policy->tensor_groups): a stage may
 *    be a group of peers splitting each layer; its cost and memory are
 *    stated there. The best plan with groups is one more candidate (the
 *    only one under policy->tensor_prefer, a test's way to get a group on
 *    a model too small to gain from one).
 *
 * Search (search.c): exact over all subsets, orders and splits up to 8
 * peers, a stated heuristic above. Two modes: experts kept with their layer,
 * and layers placed first with experts spread (experts.c); the spread mode
 * wins only when it is faster by more than the near-equal margin (or memory
 * forces it, or the policy asks for it).
 *
 * Stability: a feasible previous plan is kept unless a plan is faster by
 * more than gain_permille. Among plans within near_permille of the fastest,
 * the one that newly loads the fewest bytes wins; such plans are found by
 * rerunning the search with a price per byte moved (a Lagrangian penalty)
 * set so that moving the whole model costs 1x, 4x or 16x the near-equal
 * margin of the best time.
 */
#include "scheduler/sched_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"
#include "base/fmt.h"

typedef struct cand {
	sched__asg a;
	sched__mode mode;
} cand;

/* Sizes for infeasible_why. Two that print alike (11.04 and 11.02 MiB)
 * get their bytes too, or "needs 11.0 MiB, offers 11.0 MiB" would read
 * as a contradiction. */
typedef struct sizes {
	char need[SHOAL_FMT_BYTES_LEN], have[SHOAL_FMT_BYTES_LEN], exact[64];
} sizes;

static void sizes_fmt(sizes *z, uint64_t need, uint64_t have)
{
	shoal_fmt_bytes(z->need, sizeof z->need, need);
	shoal_fmt_bytes(z->have, sizeof z->have, have);
	z->exact[0] = '\0';
	if (!strcmp(z->need, z->have))
		snprintf(z->exact, sizeof z->exact, " (%llu > %llu bytes)",
		         (unsigned long long)need, (unsigned long long)have);
}

static shoal_err infeasible_why(const sched__ctx *c, char *why, size_t why_len)
{
	uint64_t have = 0, big = 0, kv = 0;
	for (size_t p = 0; p < c->n; p++) {
		have = sched__add(have, c->tcap[p]);
		/* a layer is on one device: host memory or the GPU */
		uint64_t one = c->gcap[p] > c->cap[p] ? c->gcap[p] : c->cap[p];
		if (one > big)
			big = one;
	}
	for (uint32_t l = 0; l < c->L; l++)
		kv = sched__add(kv, c->kv[l]);
	uint64_t need = sched__range_mem(c, SCHED__KEEP, 0, c->L, true, true);
	sizes z;
	if (need > have) {
		char w[SHOAL_FMT_BYTES_LEN], k[SHOAL_FMT_BYTES_LEN];
		sizes_fmt(&z, need, have);
		return shoal_why(
		    why, why_len, SHOAL_ERR_INFEASIBLE,
		    "needs %s (weights %s + KV cache %s for %u tokens x %u session%s), "
		    "the cluster offers %s%s",
		    z.need, shoal_fmt_bytes(w, sizeof w, need - kv),
		    shoal_fmt_bytes(k, sizeof k, kv), c->pol->ctx, c->pol->sessions,
		    c->pol->sessions == 1 ? "" : "s", z.have, z.exact);
	}
	for (uint32_t l = 0; l < c->L; l++) {
		uint64_t x = c->mpre[SCHED__SPREAD][l + 1] - c->mpre[SCHED__SPREAD][l];
		if (x > big) {
			sizes_fmt(&z, x, big);
			return shoal_why(why, why_len, SHOAL_ERR_INFEASIBLE,
			                 "layer %u needs %s on one peer, the largest peer offers "
			                 "%s%s",
			                 l, z.need, z.have, z.exact);
		}
	}
	char n[SHOAL_FMT_BYTES_LEN], h[SHOAL_FMT_BYTES_LEN];
	return shoal_why(why, why_len, SHOAL_ERR_INFEASIBLE,
	                 "needs %s and the cluster offers %s, but no split of the layers fits "
	                 "the peers' memory",
	                 shoal_fmt_bytes(n, sizeof n, need), shoal_fmt_bytes(h, sizeof h, have));
}

static bool same_assignment(const sched__ctx *c, const sched__asg *x, const sched__asg *y)
{
	if (x->n_stages != y->n_stages || !sched__tp_same(c, x, y))
		return false;
	for (uint32_t i = 0; i < x->n_stages; i++)
		if (x->st_peer[i] != y->st_peer[i] || x->st_first[i] != y->st_first[i] ||
		    x->st_end[i] != y->st_end[i])
			return false;
	for (uint32_t s = 0; s < c->n_slots; s++) {
		if (x->n_own[s] != y->n_own[s])
			return false;
		for (uint32_t k = 0; k < x->n_own[s]; k++) {
			bool found = false;
			for (uint32_t j = 0; j < y->n_own[s]; j++)
				found |= x->own[s * SHOAL_PLAN_MAX_OWNERS + k] ==
				         y->own[s * SHOAL_PLAN_MAX_OWNERS + j];
			if (!found)
				return false;
		}
	}
	return true;
}

/* Whether the previous plan, evaluated on this view, splits its stages
 * between GPU and CPU as it said it did. */
static bool same_devices(const sched__ctx *c, const sched__asg *prev)
{
	if (prev->tp)
		return true; /* a plan with groups computes on the CPUs */
	for (uint32_t i = 0; i < prev->n_stages; i++)
		if (prev->st_gend[i] != c->prev_gend[i])
			return false;
	return prev->head_gpu == c->prev_head_gpu;
}

/* Run one search + expert placement; keep the candidate when it fits. */
static shoal_err try_mode(const sched__ctx *c, sched__mode mode, uint64_t pen_num, uint64_t pen_den,
                          cand *cands, size_t *nc)
{
	cand *k = &cands[*nc];
	shoal_err e = sched__asg_init(&k->a, c);
	if (e)
		return e;
	k->mode = mode;
	if (sched__search(c, mode, pen_num, pen_den, &k->a) && sched__experts(c, mode, &k->a)) {
		sched__evaluate(c, &k->a);
		if (k->a.feasible) {
			(*nc)++;
			return SHOAL_OK;
		}
	}
	sched__asg_fini(&k->a);
	return SHOAL_OK;
}

/* true if x beats y among near-equal candidates (moved bytes count only
 * against a previous plan) */
static bool better(const cand *x, const cand *y, bool has_prev)
{
	if (has_prev && x->a.moved != y->a.moved)
		return x->a.moved < y->a.moved;
	/* a tensor group within the near-equal margin does not pay for its
	 * synchronisation rounds' risk: the pipeline wins */
	if (!x->a.tp != !y->a.tp)
		return !x->a.tp;
	if (x->mode != y->mode)
		return x->mode < y->mode;
	return x->a.time_ns < y->a.time_ns;
}

shoal_err shoal_schedule(const shoal_view *view, const shoal_manifest *m, const shoal_policy *pol,
                         const shoal_plan *prev, shoal_plan **out, char *why, size_t why_len)
{
	SHOAL_ASSERT(view && m && pol && out);
	sched__ctx c;
	cand cands[16];
	size_t nc = 0;
	*out = NULL;
	if (shoal_view_n_peers(view) > 1024)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%zu peers: at most 1024",
		                 shoal_view_n_peers(view));
	shoal_err e = sched__ctx_init(&c, view, m, pol, why, why_len);
	if (e)
		return e;
	bool moe = c.n_slots > 0;
	bool prev_ok = prev && sched__ctx_set_prev(&c, prev);
	if (prev_ok && !c.prev_gone)
		sched__evaluate(&c, &c.prev);

	int n_modes = moe ? 2 : 1;
	for (int md = 0; md < n_modes && !e; md++)
		e = try_mode(&c, (sched__mode)md, 0, 1, cands, &nc);
	const cand *tp_pick = NULL; /* the tensor candidate, under tensor_prefer */
	if (!e && pol->tensor_groups) {
		cand *k = &cands[nc];
		e = sched__asg_init(&k->a, &c);
		k->mode = SCHED__KEEP;
		if (!e && sched__tensor_search(&c, &k->a)) {
			if (pol->tensor_prefer && k->a.tp && k->a.tp->n_groups)
				tp_pick = k;
			nc++;
		} else if (!e)
			sched__asg_fini(&k->a);
	}
	if (!e && !nc)
		e = infeasible_why(&c, why, why_len);
	if (e)
		goto done;
	uint64_t t_best = SCHED__INF;
	for (size_t i = 0; i < nc; i++)
		if (cands[i].a.time_ns < t_best)
			t_best = cands[i].a.time_ns;
	if (prev_ok && pol->near_permille) {
		uint64_t total = sched__range_mem(&c, SCHED__KEEP, 0, c.L, true, true);
		/* price per byte = mult * t_best * near / (1000 * total) */
		uint64_t den = sched__muldiv_up(total, 1000, pol->near_permille);
		static const uint64_t mults[3] = {1, 4, 16};
		for (int k = 0; k < 3 && !e; k++)
			for (int md = 0; md < n_modes && !e; md++)
				e = try_mode(&c, (sched__mode)md, t_best * mults[k], den ? den : 1,
				             cands, &nc);
		if (e)
			goto done;
	}
	/* choose among the near-equal: fewest bytes moved, then experts kept,
	 * then fastest, then the first found */
	bool only_spread = false;
	if (pol->spread_experts && moe)
		for (size_t i = 0; i < nc; i++)
			only_spread |= cands[i].mode == SCHED__SPREAD;
	uint64_t t_min = SCHED__INF;
	for (size_t i = 0; i < nc; i++)
		if ((!only_spread || cands[i].mode == SCHED__SPREAD) && cands[i].a.time_ns < t_min)
			t_min = cands[i].a.time_ns;
	const cand *pick = tp_pick;
	for (size_t i = 0; i < nc && !tp_pick; i++) {
		const cand *x = &cands[i];
		if (only_spread && x->mode != SCHED__SPREAD)
			continue;
		if ((unsigned __int128)x->a.time_ns * 1000 >
		    (unsigned __int128)t_min * (1000 + pol->near_permille))
			continue;
		if (!pick || better(x, pick, prev_ok))
			pick = x;
	}
	bool keep = false;
	if (prev_ok && !c.prev_gone && c.prev.feasible) {
		keep = (!tp_pick &&
		        (unsigned __int128)pick->a.time_ns * 1000 >=
		            (unsigned __int128)c.prev.time_ns * (1000 - pol->gain_permille)) ||
		       same_assignment(&c, &pick->a, &c.prev);
		/* the same stages with another split between a peer's GPU and
		 * CPU (its GPU's figures changed) are another plan */
		keep = keep && same_devices(&c, &c.prev);
		/* so is the head peer's part with or without the MTP layer
		 * (a peer began or stopped offering it) */
		keep = keep && prev->mtp == c.mtp;
	}
	if (keep) {
		e = sched__plan_build(&c, &c.prev, prev->epoch, out);
		if (!e)
			(*out)->kept = true;
	} else {
		uint64_t base =
		    prev && prev->epoch > pol->epoch_floor ? prev->epoch : pol->epoch_floor;
		e = sched__plan_build(&c, &pick->a, base + 1, out);
	}
done:
	for (size_t i = 0; i < nc; i++)
		sched__asg_fini(&cands[i].a);
	sched__ctx_fini(&c);
	return e;
}

shoal_err shoal_schedule_sessions(const shoal_view *view, const shoal_manifest *m,
                                  shoal_policy *pol, const shoal_plan *prev, shoal_plan **out,
                                  char *why, size_t why_len)
{
	static const uint32_t more[] = {16, 8, 4};
	SHOAL_ASSERT(pol && out);
	pol->sessions = SHOAL_SCHED_SESSIONS_DEFAULT;
	shoal_err e = shoal_schedule(view, m, pol, prev, out, why, why_len);
	if (e == SHOAL_ERR_INFEASIBLE) {
		char w1[SHOAL_WHY_LEN];
		pol->sessions = 1;
		if (shoal_schedule(view, m, pol, prev, out, w1, sizeof w1) == SHOAL_OK)
			e = SHOAL_OK;
		else
			pol->sessions =
			    SHOAL_SCHED_SESSIONS_DEFAULT; /* report the default's need */
	}
	for (size_t k = 0; e == SHOAL_OK && pol->sessions == SHOAL_SCHED_SESSIONS_DEFAULT &&
	                   k < sizeof more / sizeof more[0];
	     k++) {
		shoal_policy big = *pol;
		shoal_plan *p = NULL;
		char w2[SHOAL_WHY_LEN];
		big.sessions = more[k];
		if (shoal_schedule(view, m, &big, prev, &p, w2, sizeof w2) == SHOAL_OK &&
		    shoal_plan_n_stages(p) <= shoal_plan_n_stages(*out) &&
		    shoal_plan_predicted_ns(p) <= shoal_plan_predicted_ns(*out) / 20 * 21) {
			shoal_plan_free(*out);
			*out = p;
			pol->sessions = big.sessions;
			break;
		}
		shoal_plan_free(p);
	}
	return e;
}
