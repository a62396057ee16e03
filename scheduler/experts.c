/*
 * scheduler/experts.c: owners for the routed experts of each MoE layer.
 *
 * Part: scheduler/ (pure). KEEP mode: an expert lives with its layer's
 * stage peer. SPREAD mode: the stages hold only the layers' dense weights;
 * each layer's experts are then placed by longest-processing-time-first:
 * experts in order of expected load (routing counts; uniform when unknown;
 * ties by expert id), each to the peer that keeps the layer's expert time
 * lowest: the slowest owner's finish (its share of the load at its speed,
 * plus the round trip when it is not the layer's own peer) plus one row send
 * per remote owner (the layer's peer sends them one after another, so a
 * wide fan-out costs); capped by free memory; ties go to the earlier finish.
 * With the policy's spread_experts each expert goes to the peer that would
 * finish its share earliest, round trips aside: balanced by speed alone. Then, when routing
 * counts are known and every layer is placed, hot experts (at least twice
 * the mean load) owned by the slowest owner are copied to the peer that
 * lowers the layer's time most, while the memory left over allows and the
 * time drops, up to SHOAL_PLAN_MAX_OWNERS owners.
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

#define SHARE 12 /* as in cost.c: lcm(1..4), so a load splits exactly */

typedef struct lpt {
	const sched__ctx *c;
	sched__asg *a;
	uint32_t l, s;
	uint64_t *w;    /* (n) load held per peer */
	uint64_t *free; /* (n) memory left per peer */
} lpt;

/* The layer's expert time: the slowest owner, plus the sends the layer's
 * peer makes one after another (one row per remote owner it contacts). */
static uint64_t layer_time(const lpt *x)
{
	uint64_t worst = 0, fan = 0;
	for (uint32_t o = 0; o < x->c->n; o++) {
		uint64_t t = sched__expert_time(x->c, x->l, x->s, o, x->w[o]);
		if (t > worst)
			worst = t;
		if (o != x->s && x->w[o])
			fan += x->c->send[(size_t)x->s * x->c->n + o];
	}
	return worst + fan;
}

typedef struct ekey {
	uint64_t load;
	uint32_t e;
} ekey;

static int ekey_cmp(const void *p, const void *q)
{
	const ekey *a = p, *b = q;
	if (a->load != b->load)
		return a->load > b->load ? -1 : 1;
	return a->e < b->e ? -1 : a->e > b->e;
}

static bool place_layer(lpt *x, ekey *keys)
{
	const sched__ctx *c = x->c;
	const shoal_manifest_layer *y = &c->m->layers[x->l];
	uint64_t eb = y->expert_bytes;
	for (uint32_t e = 0; e < y->n_expert; e++) {
		keys[e].load = c->load[c->slot0[x->l] + e];
		keys[e].e = e;
	}
	qsort(keys, y->n_expert, sizeof *keys, ekey_cmp);
	memset(x->w, 0, c->n * sizeof *x->w);
	uint64_t worst = 0, fan = 0; /* the layer's time so far: slowest + sends */
	for (uint32_t i = 0; i < y->n_expert; i++) {
		uint32_t slot = c->slot0[x->l] + keys[i].e;
		uint64_t share = keys[i].load * SHARE;
		uint32_t best = UINT32_MAX;
		uint64_t bscore = SCHED__INF, bt = SCHED__INF, bfin = 0, bsend = 0;
		/* the layer's own peer first, so it wins ties */
		for (uint32_t j = 0; j <= c->n; j++) {
			uint32_t o = j == 0 ? x->s : j - 1;
			if (j && o == x->s)
				continue;
			if (x->free[o] < eb)
				continue;
			uint64_t fin = sched__expert_time(c, x->l, x->s, o, x->w[o] + share);
			uint64_t snd =
			    o != x->s && !x->w[o] && share ? c->send[(size_t)x->s * c->n + o] : 0;
			uint64_t score, t;
			if (c->pol->spread_experts) {
				/* balance by speed alone */
				t = sched__expert_time(c, x->l, o, o, x->w[o] + share);
				score = t;
			} else {
				t = fin;
				score = (fin > worst ? fin : worst) + fan + snd;
			}
			if (score < bscore || (score == bscore && t < bt)) {
				bscore = score;
				bt = t;
				best = o;
				bfin = fin;
				bsend = snd;
			}
		}
		if (best == UINT32_MAX)
			return false;
		if (bfin > worst)
			worst = bfin;
		fan += bsend;
		x->w[best] += share;
		x->free[best] -= eb;
		x->a->n_own[slot] = 1;
		x->a->own[slot * SHOAL_PLAN_MAX_OWNERS] = best;
	}
	return true;
}

static bool is_owner(const sched__asg *a, uint32_t slot, uint32_t o)
{
	for (uint32_t k = 0; k < a->n_own[slot]; k++)
		if (a->own[slot * SHOAL_PLAN_MAX_OWNERS + k] == o)
			return true;
	return false;
}

/* Move expert slot's load from k owners to k + 1 (add) or back (!add). */
static void reshare(lpt *x, uint32_t slot, uint32_t extra, bool add)
{
	const sched__ctx *c = x->c;
	uint64_t load = c->load[slot] * SHARE;
	uint32_t k = x->a->n_own[slot];
	for (uint32_t j = 0; j < k; j++) {
		uint32_t o = x->a->own[slot * SHOAL_PLAN_MAX_OWNERS + j];
		x->w[o] += add ? load / (k + 1) - load / k : load / k - load / (k + 1);
	}
	if (add)
		x->w[extra] += load / (k + 1);
	else
		x->w[extra] -= load / (k + 1);
}

static void replicate_hot(lpt *x)
{
	const sched__ctx *c = x->c;
	const shoal_manifest_layer *y = &c->m->layers[x->l];
	uint64_t mean = c->loadtot[x->l] / SHARE; /* sum of loads; mean = this / n_expert */
	for (uint32_t round = 0; round < y->n_expert; round++) {
		uint64_t cur = layer_time(x);
		uint32_t straggler = 0;
		uint64_t st = 0;
		for (uint32_t o = 0; o < c->n; o++) {
			uint64_t t = sched__expert_time(c, x->l, x->s, o, x->w[o]);
			if (t > st) {
				st = t;
				straggler = o;
			}
		}
		uint32_t hot = UINT32_MAX;
		uint64_t hl = 0;
		for (uint32_t e = 0; e < y->n_expert; e++) {
			uint32_t slot = c->slot0[x->l] + e;
			uint64_t load = c->load[slot];
			if (x->a->n_own[slot] >= SHOAL_PLAN_MAX_OWNERS ||
			    !is_owner(x->a, slot, straggler))
				continue;
			if (load * y->n_expert >= 2 * mean && load > hl) {
				hl = load;
				hot = slot;
			}
		}
		if (hot == UINT32_MAX)
			return;
		uint32_t best = UINT32_MAX;
		uint64_t bt = cur;
		for (uint32_t o = 0; o < c->n; o++) {
			if (is_owner(x->a, hot, o) || x->free[o] < y->expert_bytes)
				continue;
			reshare(x, hot, o, true);
			uint64_t t = layer_time(x);
			reshare(x, hot, o, false);
			if (t < bt) {
				bt = t;
				best = o;
			}
		}
		if (best == UINT32_MAX)
			return;
		reshare(x, hot, best, true);
		x->a->own[hot * SHOAL_PLAN_MAX_OWNERS + x->a->n_own[hot]] = best;
		x->a->n_own[hot]++;
		x->free[best] -= y->expert_bytes;
	}
}

bool sched__experts(const sched__ctx *c, sched__mode mode, sched__asg *a)
{
	memset(a->n_own, 0, c->n_slots);
	if (mode == SCHED__KEEP) {
		for (uint32_t i = 0; i < a->n_stages; i++)
			for (uint32_t l = a->st_first[i]; l < a->st_end[i]; l++)
				for (uint32_t e = 0; e < c->m->layers[l].n_expert; e++) {
					uint32_t slot = c->slot0[l] + e;
					a->n_own[slot] = 1;
					a->own[slot * SHOAL_PLAN_MAX_OWNERS] = a->st_peer[i];
				}
		return true;
	}
	/* what the stages leave free */
	sched__evaluate(c, a);
	uint64_t *w = calloc(c->n, sizeof *w), *fr = calloc(c->n, sizeof *fr);
	uint32_t maxe = 1;
	for (uint32_t l = 0; l < c->L; l++)
		if (c->m->layers[l].n_expert > maxe)
			maxe = c->m->layers[l].n_expert;
	ekey *keys = calloc(maxe, sizeof *keys);
	bool ok = w && fr && keys;
	for (size_t p = 0; ok && p < c->n; p++) {
		uint64_t used = sched__host_bytes(
		    c, (uint32_t)p, sched__add(a->mem_w[p], a->mem_kv[p]), a->mem_g[p]);
		if (used > c->cap[p])
			ok = false;
		else
			fr[p] = c->cap[p] - used;
	}
	lpt x = {.c = c, .a = a, .w = w, .free = fr};
	for (uint32_t i = 0; ok && i < a->n_stages; i++)
		for (uint32_t l = a->st_first[i]; ok && l < a->st_end[i]; l++) {
			if (!c->m->layers[l].n_expert)
				continue;
			x.l = l;
			x.s = a->st_peer[i];
			ok = place_layer(&x, keys);
		}
	/* replicas only from what every layer's placement left over, so that
	 * an early layer's copies never crowd out a later layer's experts */
	for (uint32_t i = 0; ok && i < a->n_stages; i++)
		for (uint32_t l = a->st_first[i]; l < a->st_end[i]; l++) {
			const shoal_manifest_layer *y = &c->m->layers[l];
			if (!y->n_expert || !shoal_view_layer_has_counts(c->v, l))
				continue;
			x.l = l;
			x.s = a->st_peer[i];
			memset(w, 0, c->n * sizeof *w);
			for (uint32_t e = 0; e < y->n_expert; e++) {
				uint32_t slot = c->slot0[l] + e;
				w[a->own[slot * SHOAL_PLAN_MAX_OWNERS]] += c->load[slot] * SHARE;
			}
			replicate_hot(&x);
		}
	free(w);
	free(fr);
	free(keys);
	return ok;
}
