/*
 * scheduler/asg.c: an assignment's storage (sched__asg: stages, expert
 * owners, the figures evaluation fills) and its tensor groups' (sched__tp):
 * allocation, copy, comparison, and a group's lead.
 *
 * Part: scheduler/ (pure). Beneath cost.c, search.c and tensor.c, which
 * all build assignments: it calls none of them. Divisions: assignments,
 * tensor groups.
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- assignments ------------------------------------------------------- */

shoal_err sched__asg_init(sched__asg *a, const sched__ctx *c)
{
	memset(a, 0, sizeof *a);
	size_t ns = c->L; /* a stage holds at least one layer */
	SCHED__ALLOC(a->st_peer, ns);
	SCHED__ALLOC(a->st_first, ns);
	SCHED__ALLOC(a->st_end, ns);
	SCHED__ALLOC(a->st_gend, ns);
	SCHED__ALLOC(a->st_ns, ns);
	SCHED__ALLOC(a->n_own, c->n_slots);
	SCHED__ALLOC(a->own, (size_t)c->n_slots * SHOAL_PLAN_MAX_OWNERS);
	SCHED__ALLOC(a->mem_w, c->n);
	SCHED__ALLOC(a->mem_kv, c->n);
	SCHED__ALLOC(a->mem_g, c->n);
	SCHED__ALLOC(a->n_exp, c->n);
	return SHOAL_OK;
nomem:
	sched__asg_fini(a);
	return SHOAL_ERR_NOMEM;
}

void sched__asg_fini(sched__asg *a)
{
	free(a->st_peer);
	free(a->st_first);
	free(a->st_end);
	free(a->st_gend);
	free(a->st_ns);
	free(a->n_own);
	free(a->own);
	free(a->mem_w);
	free(a->mem_kv);
	free(a->mem_g);
	free(a->n_exp);
	sched__tp_free(a->tp);
	memset(a, 0, sizeof *a);
}

void sched__asg_copy(sched__asg *d, const sched__asg *s, const sched__ctx *c)
{
	size_t ns = c->L;
	d->n_stages = s->n_stages;
	memcpy(d->st_peer, s->st_peer, ns * sizeof *d->st_peer);
	memcpy(d->st_first, s->st_first, ns * sizeof *d->st_first);
	memcpy(d->st_end, s->st_end, ns * sizeof *d->st_end);
	memcpy(d->st_gend, s->st_gend, ns * sizeof *d->st_gend);
	memcpy(d->st_ns, s->st_ns, ns * sizeof *d->st_ns);
	memcpy(d->n_own, s->n_own, c->n_slots);
	memcpy(d->own, s->own, (size_t)c->n_slots * SHOAL_PLAN_MAX_OWNERS * sizeof *d->own);
	memcpy(d->mem_w, s->mem_w, c->n * sizeof *d->mem_w);
	memcpy(d->mem_kv, s->mem_kv, c->n * sizeof *d->mem_kv);
	memcpy(d->mem_g, s->mem_g, c->n * sizeof *d->mem_g);
	d->head_gpu = s->head_gpu;
	memcpy(d->n_exp, s->n_exp, c->n * sizeof *d->n_exp);
	if (!sched__tp_copy(&d->tp, s->tp, c)) {
		d->feasible = false; /* out of memory: never adopted */
		d->time_ns = SCHED__INF;
		return;
	}
	d->feasible = s->feasible;
	d->time_ns = s->time_ns;
	d->moved = s->moved;
	d->bad_peer = s->bad_peer;
}

/* ---- tensor groups ---------------------------------------------------- */

sched__tp *sched__tp_new(const sched__ctx *c)
{
	sched__tp *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	size_t n = c->n;
	t->g_n = calloc(n, sizeof *t->g_n);
	t->g_mem = calloc(n * n, sizeof *t->g_mem);
	t->g_w = calloc(n * n, sizeof *t->g_w);
	t->st_group = calloc(c->L, sizeof *t->st_group);
	if (!t->g_n || !t->g_mem || !t->g_w || !t->st_group) {
		sched__tp_free(t);
		return NULL;
	}
	return t;
}

void sched__tp_free(sched__tp *t)
{
	if (!t)
		return;
	free(t->g_n);
	free(t->g_mem);
	free(t->g_w);
	free(t->st_group);
	free(t);
}

bool sched__tp_copy(sched__tp **dst, const sched__tp *src, const sched__ctx *c)
{
	if (!src) {
		sched__tp_free(*dst);
		*dst = NULL;
		return true;
	}
	if (!*dst && !(*dst = sched__tp_new(c)))
		return false;
	sched__tp *d = *dst;
	size_t n = c->n;
	d->n_groups = src->n_groups;
	memcpy(d->g_n, src->g_n, n * sizeof *d->g_n);
	memcpy(d->g_mem, src->g_mem, n * n * sizeof *d->g_mem);
	memcpy(d->g_w, src->g_w, n * n * sizeof *d->g_w);
	memcpy(d->st_group, src->st_group, c->L * sizeof *d->st_group);
	return true;
}

bool sched__tp_same(const sched__ctx *c, const sched__asg *x, const sched__asg *y)
{
	const sched__tp *a = x->tp, *b = y->tp;
	if (!a || !b)
		return !a == !b;
	if (a->n_groups != b->n_groups)
		return false;
	for (uint32_t i = 0; i < x->n_stages; i++) {
		uint32_t ga = a->st_group[i], gb = b->st_group[i];
		if ((ga == UINT32_MAX) != (gb == UINT32_MAX))
			return false;
		if (ga == UINT32_MAX)
			continue;
		if (a->g_n[ga] != b->g_n[gb] ||
		    memcmp(a->g_mem + (size_t)ga * c->n, b->g_mem + (size_t)gb * c->n,
		           a->g_n[ga] * sizeof *a->g_mem) ||
		    memcmp(a->g_w + (size_t)ga * c->n, b->g_w + (size_t)gb * c->n,
		           a->g_n[ga] * sizeof *a->g_w))
			return false;
	}
	return true;
}

uint32_t sched__tp_lead_among(uint32_t k, const uint32_t *mem, const uint64_t *w)
{
	uint32_t b = 0;
	for (uint32_t j = 1; j < k; j++)
		if (w[j] > w[b])
			b = j;
	return mem[b];
}

uint32_t sched__tp_lead(const sched__ctx *c, const sched__tp *t, uint32_t g)
{
	return sched__tp_lead_among(t->g_n[g], t->g_mem + (size_t)g * c->n,
	                            t->g_w + (size_t)g * c->n);
}
