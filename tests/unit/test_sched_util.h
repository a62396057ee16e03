/*
 * tests/unit/test_sched_util.h: random clusters and manifests for the scheduler's
 * property tests, and an independent statement of the cost model's pieces
 * (the tests recompute times and memory from first principles instead of
 * calling the scheduler's internals).
 *
 * An instance is kept as plain arrays so that a test can build the same view
 * with peers, links and routing counts given in any order.
 */
#ifndef SHOAL_TESTS_TEST_SCHED_UTIL_H
#define SHOAL_TESTS_TEST_SCHED_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/plan.h"

#define TI_MAX_PEERS   12
#define TI_MAX_LAYERS  16
#define TI_MAX_LINKS   (TI_MAX_PEERS * (TI_MAX_PEERS - 1) / 2)
#define TI_MAX_EXPERTS 8

typedef struct ti_rng {
	uint64_t s;
} ti_rng;

static inline uint64_t ti_next(ti_rng *r)
{
	/* splitmix64: seeded, so every run tests the same instances */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint64_t ti_range(ti_rng *r, uint64_t lo, uint64_t hi) /* [lo, hi] */
{
	return lo + ti_next(r) % (hi - lo + 1);
}

typedef struct ti_link {
	int a, b;
	uint64_t lat, bw;
} ti_link;

typedef struct ti_inst {
	int n;
	shoal_view_peer p[TI_MAX_PEERS];
	int nl;
	ti_link l[TI_MAX_LINKS];
	uint64_t def_lat, def_bw;
	shoal_manifest m;
	shoal_manifest_layer layers[TI_MAX_LAYERS];
	bool has_counts;
	uint64_t counts[TI_MAX_LAYERS][TI_MAX_EXPERTS];
} ti_inst;

#define TI_GB 1000000000ULL

/* A random instance: n peers, L layers; moe: some layers get experts. */
static inline void ti_random(ti_inst *t, ti_rng *r, int n, int L, bool moe)
{
	memset(t, 0, sizeof *t);
	t->n = n;
	t->m.n_layer = (uint32_t)L;
	t->m.layers = t->layers;
	snprintf(t->m.name, sizeof t->m.name, "random");
	uint64_t total = 0;
	for (int l = 0; l < L; l++) {
		shoal_manifest_layer *y = &t->layers[l];
		y->bytes = ti_range(r, 50, 2000) * 1000000ULL;
		y->flops = y->bytes * ti_range(r, 1, 4);
		y->kv_bytes_per_token = ti_range(r, 0, 64) * 1024;
		y->attn_flops_per_ctx = ti_range(r, 0, 1) ? ti_range(r, 1000, 100000) : 0;
		total += y->bytes;
		if (moe && ti_range(r, 0, 2)) {
			y->n_expert = (uint32_t)ti_range(r, 2, TI_MAX_EXPERTS);
			y->n_expert_used = (uint32_t)ti_range(r, 1, 2);
			y->expert_bytes = ti_range(r, 10, 500) * 1000000ULL;
			y->expert_flops = y->expert_bytes * 2;
			total += y->expert_bytes * y->n_expert;
		}
	}
	t->m.embd_bytes = ti_range(r, 10, 1000) * 1000000ULL;
	t->m.tied_head = ti_range(r, 0, 1);
	t->m.head_bytes =
	    t->m.embd_bytes + (t->m.tied_head ? 4096 : ti_range(r, 0, 100) * 1000000ULL);
	t->m.head_flops = t->m.head_bytes * 2;
	t->m.act_bytes_per_token = ti_range(r, 1, 64) * 1024;
	total += t->m.embd_bytes + t->m.head_bytes;
	for (int i = 0; i < n; i++) {
		shoal_view_peer *p = &t->p[i];
		for (int b = 0; b < 16; b++)
			p->id.b[b] = (uint8_t)ti_next(r);
		snprintf(p->name, sizeof p->name, "peer%d", i);
		/* from a fifth of the model to 1.5x: plans of 1 to 5+ peers */
		p->mem_bytes = total / 5 + ti_range(r, 0, total * 13 / 10);
		p->mem_bw = ti_range(r, 20, 800) * TI_GB;
		p->flops = ti_range(r, 200, 30000) * TI_GB;
		p->load_pct = ti_range(r, 0, 3) ? 0 : (uint32_t)ti_range(r, 0, 9) * 10;
	}
	t->def_lat = ti_range(r, 5, 500) * 1000;
	t->def_bw = ti_range(r, 1, 100) * TI_GB / 8;
	for (int a = 0; a < n; a++)
		for (int b = a + 1; b < n; b++)
			if (ti_range(r, 0, 3)) {
				ti_link *k = &t->l[t->nl++];
				k->a = a;
				k->b = b;
				k->lat = ti_range(r, 5, 500) * 1000;
				k->bw = ti_range(r, 1, 100) * TI_GB / 8;
			}
	t->has_counts = moe && ti_range(r, 0, 1);
	for (int l = 0; l < L && t->has_counts; l++)
		for (uint32_t e = 0; e < t->layers[l].n_expert; e++)
			t->counts[l][e] =
			    ti_range(r, 0, 3) ? ti_range(r, 0, 100) : ti_range(r, 500, 2000);
}

/* Fisher-Yates with the test's rng. */
static inline void ti_shuffle(int *a, int n, ti_rng *r)
{
	for (int i = 0; i < n; i++)
		a[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)ti_range(r, 0, (uint64_t)i), x = a[i];
		a[i] = a[j];
		a[j] = x;
	}
}

/* Build the view; perm_rng NULL: natural order, else a random order of
 * peers, links (each link possibly flipped) and routing counts. */
static inline shoal_view *ti_view(const ti_inst *t, ti_rng *perm_rng)
{
	shoal_view *v = shoal_view_new(t->def_lat, t->def_bw);
	int pp[TI_MAX_PEERS], lp[TI_MAX_LINKS];
	for (int i = 0; i < t->n; i++)
		pp[i] = i;
	for (int i = 0; i < t->nl; i++)
		lp[i] = i;
	if (perm_rng) {
		ti_shuffle(pp, t->n, perm_rng);
		ti_shuffle(lp, t->nl, perm_rng);
	}
	for (int i = 0; i < t->n; i++)
		if (shoal_view_add_peer(v, &t->p[pp[i]], NULL, 0))
			abort();
	for (int i = 0; i < t->nl; i++) {
		const ti_link *k = &t->l[lp[i]];
		bool flip = perm_rng && ti_range(perm_rng, 0, 1);
		shoal_view_set_link(v, &t->p[flip ? k->b : k->a].id, &t->p[flip ? k->a : k->b].id,
		                    k->lat, k->bw, NULL, 0);
	}
	if (t->has_counts) {
		int order[TI_MAX_LAYERS * TI_MAX_EXPERTS], n = 0;
		int L = (int)t->m.n_layer;
		if (perm_rng)
			ti_shuffle(order, L * TI_MAX_EXPERTS, perm_rng);
		else
			for (int i = 0; i < L * TI_MAX_EXPERTS; i++)
				order[i] = i;
		for (int i = 0; i < L * TI_MAX_EXPERTS; i++) {
			int l = order[i] / TI_MAX_EXPERTS, e = order[i] % TI_MAX_EXPERTS;
			if ((uint32_t)e < t->layers[l].n_expert) {
				shoal_view_set_expert_count(v, (uint32_t)l, (uint32_t)e,
				                            t->counts[l][e]);
				n++;
			}
		}
		(void)n;
	}
	return v;
}

/* ---- the cost model, restated ------------------------------------------ */

static inline uint64_t ti_ceil_ns(unsigned __int128 amount, uint64_t per_s)
{
	unsigned __int128 num = amount * 1000000000ULL;
	return (uint64_t)(num / per_s + (num % per_s != 0));
}

static inline uint64_t ti_max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static inline uint64_t ti_eff(uint64_t x, uint32_t load)
{
	uint64_t e = (uint64_t)((unsigned __int128)x * (100 - load) / 100);
	return e ? e : 1;
}

/* Memory a peer may use. */
static inline uint64_t ti_cap(const shoal_view_peer *p, const shoal_policy *pol)
{
	return (uint64_t)((unsigned __int128)p->mem_bytes * (1000 - pol->headroom_permille) / 1000);
}

/* Find the view peer with this id. */
static inline const shoal_view_peer *ti_find(const ti_inst *t, const shoal_peer_id *id)
{
	for (int i = 0; i < t->n; i++)
		if (!memcmp(t->p[i].id.b, id->b, SHOAL_PEER_ID_LEN))
			return &t->p[i];
	return NULL;
}

#endif
