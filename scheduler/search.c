/*
 * scheduler/search.c: choosing the stages, i.e. which peers run which
 * contiguous layer ranges in which order, for the cost of cost.c.
 *
 * Part: scheduler/ (pure). Divisions: range costs, the exact search (up to 8
 * peers), the chain search along a fixed order, the heuristic above 8 peers.
 *
 * Exact: a Held-Karp dynamic programme over (set of peers used, last peer,
 * layers done) finds the optimum over every subset, order and split at once;
 * for 8 peers and L layers that is 2^8 * 8 * L states with 8 * L transitions
 * each (about 60 M steps for L = 61, far fewer when memory bounds ranges).
 * Above 8 peers: see search_heuristic.
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

#define SCHED_EXACT_MAX 8 /* 2^8 subsets x 8 last peers: the exact search's limit */
/* Above 8 peers the pool holds at least the 6 fastest: a pipeline rarely
 * gains from more peers than memory needs (each adds a hop), and 2^6 x 6
 * states cost a seventh of 2^8 x 8, which keeps 64 peers under 50 ms. */
#define SCHED_POOL_MIN 6
/* The adjacent-swap improvement costs one chain DP (k^2 L^2 / 4 steps) per
 * swap; past 48 pool peers a pass would exceed the 50 ms budget for 64 peers
 * and a 61-layer model, so larger pools keep their constructed order. */
#define SCHED_SWAP_MAX 48

/* ---- range costs ------------------------------------------------------- */

typedef struct search_in {
	const sched__ctx *c;
	sched__mode mode;
	uint64_t *cpre; /* (n, L+1) time + penalty prefix */
	uint64_t *gpre; /* (n, L+1) the same on each peer's GPU (rows of peers
	                   without one unused) */
} search_in;

/* A stage on p from layer a to b: its first layers on p's GPU while they
 * fit (sched__gpu_end), the rest and the embedding in host memory, the head
 * on the GPU when the GPU holds the stage to its end and the head too. */
static bool fits(const search_in *s, uint32_t p, uint32_t a, uint32_t b, bool first)
{
	const sched__ctx *c = s->c;
	uint64_t tot = sched__range_mem(c, s->mode, a, b, first, b == c->L);
	if (!c->gcap[p])
		return tot <= c->cap[p];
	uint32_t g = sched__gpu_end(c, s->mode, p, a, b);
	uint64_t on = c->mpre[s->mode][g] - c->mpre[s->mode][a];
	if (b == c->L && g == b && sched__ghead_fits(c, s->mode, p, a)) {
		on += c->head_mem;
		tot = sched__add(tot, sched__head_copy(c, p, first));
	}
	return sched__host_bytes(c, p, tot, on) <= c->cap[p];
}

static uint64_t range_cost(const search_in *s, uint32_t p, uint32_t a, uint32_t b)
{
	const sched__ctx *c = s->c;
	const uint64_t *row = s->cpre + (size_t)p * (c->L + 1);
	if (!c->gcap[p])
		return row[b] - row[a] + (b == c->L ? c->head_t[p] : 0);
	const uint64_t *grow = s->gpre + (size_t)p * (c->L + 1);
	uint32_t g = sched__gpu_end(c, s->mode, p, a, b);
	uint64_t t = grow[g] - grow[a] + row[b] - row[g];
	if (b == c->L)
		t += g == b && sched__ghead_fits(c, s->mode, p, a) ? c->ghead_t[p] : c->head_t[p];
	return t;
}

/* The cheapest layer l (or the head, l = L) on peer p, whatever its device:
 * the exact search's lower bound. */
static uint64_t unit_min(const search_in *s, uint32_t p, uint32_t l)
{
	const sched__ctx *c = s->c;
	size_t W = c->L + 1;
	uint64_t x, y;
	if (l == c->L) {
		x = c->head_t[p];
		y = c->gcap[p] ? c->ghead_t[p] : x; /* a tensor unit's context has no GPU tables */
	} else {
		x = s->cpre[p * W + l + 1] - s->cpre[p * W + l];
		y = c->gcap[p] ? s->gpre[p * W + l + 1] - s->gpre[p * W + l] : x;
	}
	return c->gcap[p] && y < x ? y : x;
}

static shoal_err build_cpre(search_in *s, uint64_t pen_num, uint64_t pen_den)
{
	const sched__ctx *c = s->c;
	uint32_t L = c->L;
	s->cpre = malloc(c->n * (L + 1) * sizeof *s->cpre);
	s->gpre = calloc(c->n * (L + 1), sizeof *s->gpre);
	if (!s->cpre || !s->gpre) {
		free(s->cpre);
		free(s->gpre);
		return SHOAL_ERR_NOMEM;
	}
	for (size_t p = 0; p < c->n; p++) {
		uint64_t *row = s->cpre + p * (L + 1), *grow = s->gpre + p * (L + 1);
		const uint64_t *t = c->tpre + p * (L + 1), *gt = c->gtpre + p * (L + 1);
		uint64_t pen = 0;
		row[0] = 0;
		for (uint32_t l = 0; l < L; l++) {
			if (c->has_prev && pen_num) {
				const shoal_manifest_layer *y = &c->m->layers[l];
				if (!c->prev_base[p * L + l])
					pen += y->bytes;
				if (s->mode == SCHED__KEEP)
					pen += (y->n_expert - c->prev_exp[p * L + l]) *
					       y->expert_bytes;
			}
			uint64_t pn = pen_num && pen ? sched__muldiv_up(pen, pen_num, pen_den) : 0;
			row[l + 1] = t[l + 1] + pn;
			grow[l + 1] = gt[l + 1] + pn;
		}
	}
	return SHOAL_OK;
}

static void set_stages(sched__asg *a, const uint32_t *peer, const uint32_t *first,
                       const uint32_t *end, uint32_t ns)
{
	/* given in reverse pipeline order */
	a->n_stages = ns;
	for (uint32_t i = 0; i < ns; i++) {
		a->st_peer[i] = peer[ns - 1 - i];
		a->st_first[i] = first[ns - 1 - i];
		a->st_end[i] = end[ns - 1 - i];
	}
}

/* ---- exact ------------------------------------------------------------- */

/* Held-Karp over the peers of pool (k <= 8, ascending view index). Returns
 * the best cost (SCHED__INF if nothing fits) and its stages in *a.
 * Branch and bound: inc is the cost of a known solution; a state whose cost
 * plus a lower bound of the rest (each remaining layer on the pool's
 * cheapest peer for it, then the cheapest head) exceeds inc cannot lead to
 * the optimum and is not expanded. Only states strictly above inc are cut,
 * so every optimal path, its values and its parents stay as without the
 * bound: the result does not change, only the time (a single fast peer
 * usually bounds away almost every multi-stage state). */
static uint64_t search_exact(const search_in *s, const uint32_t *pool, uint32_t k, uint64_t inc,
                             sched__asg *a)
{
	const sched__ctx *c = s->c;
	uint32_t L = c->L;
	size_t W = L + 1, S = (size_t)1 << k;
	uint64_t *f = malloc(S * k * W * sizeof *f);
	uint32_t *par = malloc(S * k * W * sizeof *par);
	uint64_t *lb = malloc(W * sizeof *lb);
	if (!f || !par || !lb) {
		free(f);
		free(par);
		free(lb);
		return SCHED__INF;
	}
	lb[L] = SCHED__INF;
	for (uint32_t q = 0; q < k; q++)
		if (unit_min(s, pool[q], L) < lb[L])
			lb[L] = unit_min(s, pool[q], L);
	for (uint32_t l = L; l-- > 0;) {
		uint64_t mn = SCHED__INF;
		for (uint32_t q = 0; q < k; q++)
			if (unit_min(s, pool[q], l) < mn)
				mn = unit_min(s, pool[q], l);
		lb[l] = lb[l + 1] + mn;
	}
	for (size_t i = 0; i < S * k * W; i++)
		f[i] = SCHED__INF;
#define HK(mask, q, b) (((size_t)(mask)*k + (q)) * W + (b))
	for (uint32_t q = 0; q < k; q++)
		for (uint32_t b = 1; b <= L; b++) {
			if (!fits(s, pool[q], 0, b, true))
				break;
			uint64_t t = range_cost(s, pool[q], 0, b);
			if (b < L && t + lb[b] > inc)
				break;
			if (t > inc)
				continue;
			f[HK(1u << q, q, b)] = t;
			par[HK(1u << q, q, b)] = UINT32_MAX;
		}
	for (size_t mask = 1; mask < S; mask++)
		for (uint32_t q = 0; q < k; q++) {
			if (!(mask >> q & 1))
				continue;
			for (uint32_t b = 1; b < L; b++) {
				uint64_t val = f[HK(mask, q, b)];
				if (val == SCHED__INF || val + lb[b] > inc)
					continue;
				for (uint32_t r = 0; r < k; r++) {
					if (mask >> r & 1)
						continue;
					uint32_t pr = pool[r];
					uint64_t base = val + c->hop[(size_t)pool[q] * c->n + pr];
					size_t nm = mask | (size_t)1 << r;
					for (uint32_t e = b + 1; e <= L; e++) {
						if (!fits(s, pr, b, e, false))
							break;
						uint64_t t = base + range_cost(s, pr, b, e);
						if (e < L && t + lb[e] > inc)
							break; /* t + lb[e] grows with e */
						if (t > inc)
							continue;
						if (t < f[HK(nm, r, e)]) {
							f[HK(nm, r, e)] = t;
							par[HK(nm, r, e)] = q << 24 | b;
						}
					}
				}
			}
		}
	uint64_t best = SCHED__INF;
	size_t bm = 0;
	uint32_t bq = 0;
	for (size_t mask = 1; mask < S; mask++)
		for (uint32_t q = 0; q < k; q++)
			if (f[HK(mask, q, L)] < best) {
				best = f[HK(mask, q, L)];
				bm = mask;
				bq = q;
			}
	if (best != SCHED__INF) {
		uint32_t peer[SCHED_EXACT_MAX], first[SCHED_EXACT_MAX], end[SCHED_EXACT_MAX],
		    ns = 0;
		size_t mask = bm;
		uint32_t q = bq, b = L;
		for (;;) {
			uint32_t pp = par[HK(mask, q, b)];
			uint32_t a0 = pp == UINT32_MAX ? 0 : (pp & 0xffffff);
			peer[ns] = pool[q];
			first[ns] = a0;
			end[ns] = b;
			ns++;
			if (pp == UINT32_MAX)
				break;
			mask &= ~((size_t)1 << q);
			q = pp >> 24;
			b = a0;
		}
		set_stages(a, peer, first, end, ns);
	}
#undef HK
	free(f);
	free(par);
	free(lb);
	return best;
}

/* ---- chain ------------------------------------------------------------- */

/* The best stages that use a subsequence of order[0..k) in that order
 * (peers may be skipped). Same result form as search_exact. */
static uint64_t search_chain(const search_in *s, const uint32_t *order, uint32_t k, sched__asg *a)
{
	const sched__ctx *c = s->c;
	uint32_t L = c->L;
	size_t W = L + 1;
	uint64_t *g = malloc((size_t)k * W * sizeof *g);
	uint32_t *par = malloc((size_t)k * W * sizeof *par);
	uint32_t *peer = malloc(3 * (size_t)(k + 1) * sizeof *peer);
	uint64_t best = SCHED__INF;
	if (!g || !par || !peer)
		goto out;
	for (size_t i = 0; i < (size_t)k * W; i++)
		g[i] = SCHED__INF;
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t b = 1; b <= L; b++) {
			if (!fits(s, order[i], 0, b, true))
				break;
			g[i * W + b] = range_cost(s, order[i], 0, b);
			par[i * W + b] = UINT32_MAX;
		}
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t b = 1; b < L; b++) {
			uint64_t val = g[i * W + b];
			if (val == SCHED__INF)
				continue;
			for (uint32_t j = i + 1; j < k; j++) {
				uint32_t pj = order[j];
				uint64_t base = val + c->hop[(size_t)order[i] * c->n + pj];
				for (uint32_t e = b + 1; e <= L; e++) {
					if (!fits(s, pj, b, e, false))
						break;
					uint64_t t = base + range_cost(s, pj, b, e);
					if (t < g[j * W + e]) {
						g[j * W + e] = t;
						par[j * W + e] = i << 16 | b;
					}
				}
			}
		}
	uint32_t bi = 0;
	for (uint32_t i = 0; i < k; i++)
		if (g[i * W + L] < best) {
			best = g[i * W + L];
			bi = i;
		}
	if (best != SCHED__INF) {
		uint32_t *first = peer + k + 1, *end = first + k + 1, ns = 0;
		uint32_t i = bi, b = L;
		for (;;) {
			uint32_t pp = par[i * W + b];
			uint32_t a0 = pp == UINT32_MAX ? 0 : (pp & 0xffff);
			peer[ns] = order[i];
			first[ns] = a0;
			end[ns] = b;
			ns++;
			if (pp == UINT32_MAX)
				break;
			i = pp >> 16;
			b = a0;
		}
		set_stages(a, peer, first, end, ns);
	}
out:
	free(g);
	free(par);
	free(peer);
	return best;
}

/* The exact search on a pool, bounded by the chain search in the pool's
 * order (cheap: k^2 L^2 / 4 steps) as the first known solution. */
static uint64_t search_exact_bounded(const search_in *s, const uint32_t *pool, uint32_t k,
                                     sched__asg *a, sched__asg *tmp)
{
	uint64_t inc = search_chain(s, pool, k, a);
	uint64_t best = search_exact(s, pool, k, inc, tmp);
	if (best != SCHED__INF && best <= inc) {
		sched__asg_copy(a, tmp, s->c);
		return best;
	}
	return inc;
}

/* ---- heuristic above 8 peers ------------------------------------------- */

/* 1. Rank the peers by the time the whole model would take on each alone
 *    (the speed that matters for this model), ties by id.
 * 2. Pool: the fastest peers until their memory covers the model with one
 *    layer of slack per peer (contiguous ranges waste at most a layer each),
 *    and at least SCHED_POOL_MIN peers.
 * 3. A pool of 8 is solved exactly. A larger one is searched as a chain:
 *    once in rank order and once in nearest-neighbour order by hop time from
 *    the fastest peer; the better order is then improved by one pass of
 *    adjacent swaps (kept when they lower the cost).
 * 4. When nothing fits, the pool doubles, up to every peer. */
typedef struct rank_key {
	uint64_t t;
	uint32_t p;
} rank_key;

static int rank_cmp(const void *x, const void *y)
{
	const rank_key *a = x, *b = y;
	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	return a->p < b->p ? -1 : a->p > b->p;
}

static int u32_cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

static uint64_t search_pool(const search_in *s, const uint32_t *ranked, uint32_t k, sched__asg *a,
                            sched__asg *tmp)
{
	const sched__ctx *c = s->c;
	uint32_t *order = malloc(2 * (size_t)k * sizeof *order);
	if (!order)
		return SCHED__INF;
	uint32_t *nn = order + k;
	uint64_t best;
	if (k <= SCHED_EXACT_MAX) {
		memcpy(order, ranked, k * sizeof *order);
		qsort(order, k, sizeof *order, u32_cmp);
		best = search_exact_bounded(s, order, k, a, tmp);
		free(order);
		return best;
	}
	/* nearest neighbour by hop time from the fastest, ties by rank */
	uint8_t *used = calloc(k, 1);
	if (!used) {
		free(order);
		return SCHED__INF;
	}
	nn[0] = ranked[0];
	used[0] = 1;
	for (uint32_t i = 1; i < k; i++) {
		uint32_t bj = 0;
		uint64_t bh = SCHED__INF;
		for (uint32_t j = 0; j < k; j++)
			if (!used[j] && c->hop[(size_t)nn[i - 1] * c->n + ranked[j]] < bh) {
				bh = c->hop[(size_t)nn[i - 1] * c->n + ranked[j]];
				bj = j;
			}
		used[bj] = 1;
		nn[i] = ranked[bj];
	}
	free(used);
	memcpy(order, ranked, k * sizeof *order);
	best = search_chain(s, order, k, a);
	uint64_t t = search_chain(s, nn, k, tmp);
	if (t < best) {
		best = t;
		sched__asg_copy(a, tmp, c);
		memcpy(order, nn, k * sizeof *order);
	}
	if (best != SCHED__INF && k <= SCHED_SWAP_MAX)
		for (uint32_t i = 0; i + 1 < k; i++) {
			uint32_t x = order[i];
			order[i] = order[i + 1];
			order[i + 1] = x;
			t = search_chain(s, order, k, tmp);
			if (t < best) {
				best = t;
				sched__asg_copy(a, tmp, c);
			} else {
				order[i + 1] = order[i];
				order[i] = x;
			}
		}
	free(order);
	return best;
}

static uint64_t search_heuristic(const search_in *s, sched__asg *a)
{
	const sched__ctx *c = s->c;
	uint32_t n = (uint32_t)c->n, L = c->L;
	rank_key *rk = malloc(n * sizeof *rk);
	uint32_t *ranked = malloc(n * sizeof *ranked);
	sched__asg tmp;
	uint64_t best = SCHED__INF;
	if (!rk || !ranked || sched__asg_init(&tmp, c)) {
		free(rk);
		free(ranked);
		return SCHED__INF;
	}
	for (uint32_t p = 0; p < n; p++) {
		rk[p].t = range_cost(s, p, 0, L);
		rk[p].p = p;
	}
	qsort(rk, n, sizeof *rk, rank_cmp);
	for (uint32_t i = 0; i < n; i++)
		ranked[i] = rk[i].p;
	uint64_t need = sched__range_mem(c, s->mode, 0, L, true, true), maxl = 0;
	for (uint32_t l = 0; l < L; l++) {
		uint64_t x = c->mpre[s->mode][l + 1] - c->mpre[s->mode][l];
		if (x > maxl)
			maxl = x;
	}
	uint32_t k = 0;
	uint64_t have = 0;
	while (k < n &&
	       (k < SCHED_POOL_MIN ||
	        have < sched__add(need, k && maxl > UINT64_MAX / k ? UINT64_MAX : maxl * k))) {
		have = sched__add(have, c->tcap[ranked[k]]);
		k++;
	}
	for (;;) {
		best = search_pool(s, ranked, k, a, &tmp);
		if (best != SCHED__INF || k == n)
			break;
		k = k * 2 > n ? n : k * 2;
	}
	sched__asg_fini(&tmp);
	free(rk);
	free(ranked);
	return best;
}

bool sched__search(const sched__ctx *c, sched__mode mode, uint64_t pen_num, uint64_t pen_den,
                   sched__asg *a)
{
	search_in s = {.c = c, .mode = mode};
	if (build_cpre(&s, pen_num, pen_den))
		return false;
	uint64_t best;
	if (c->n <= SCHED_EXACT_MAX) {
		uint32_t pool[SCHED_EXACT_MAX];
		for (uint32_t p = 0; p < c->n; p++)
			pool[p] = p;
		sched__asg tmp;
		if (sched__asg_init(&tmp, c)) {
			free(s.cpre);
			free(s.gpre);
			return false;
		}
		best = search_exact_bounded(&s, pool, (uint32_t)c->n, a, &tmp);
		sched__asg_fini(&tmp);
	} else {
		best = search_heuristic(&s, a);
	}
	free(s.cpre);
	free(s.gpre);
	return best != SCHED__INF;
}
