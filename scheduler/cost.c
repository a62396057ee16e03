/*
 * scheduler/cost.c: the cost model, as tables computed once per schedule()
 * call, and the evaluation of an assignment (memory per peer, predicted
 * time per token, bytes moved).
 *
 * Part: scheduler/ (pure). Divisions: the context, the previous plan,
 * evaluation (of a pipeline; tensor.c evaluates groups). The model itself is
 * stated in scheduler/schedule.c. Calls only arith.c and asg.c beneath it.
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

/* Bounds that keep every sum below 2^63 whatever the input: a unit time
 * (one layer on one peer, one hop) is clamped to 2^40 ns (SCHED__TMAX, 18
 * minutes, far beyond any plan worth serving) and there are at most 2^10
 * layers, so sums of times stay below 2^52; bandwidths and speeds are
 * clamped to 2^50 per second (a petabyte/s) so that 128-bit products never
 * overflow.
 * Layers <= 1024 (published models have <= 128; the exact search keeps
 * 2^8 x 8 x (layers + 1) 12-byte states: 25 MB at 1024), experts per layer
 * <= 4096 (the widest published MoE routes among 384) and experts in all
 * <= 2^20 (an assignment keeps 17 bytes per expert: 17 MB). */
#define SCHED_RATE_MAX    (1ULL << 50)
#define SCHED_MAX_LAYERS  1024u
#define SCHED_MAX_EXPERTS 4096u
#define SCHED_MAX_SLOTS   (1u << 20)
#define SCHED_MAX_BYTES   (1ULL << 50) /* one tensor group: 1 PiB */
/* Routing counts are renormalised to sum to 2^20 per layer: enough
 * resolution (one part in a million) and small enough for 128-bit products. */
#define SCHED_LOAD_SCALE (1ULL << 20)
/* 12 = lcm(1, 2, 3, 4): a replicated expert's load splits exactly among up
 * to SHOAL_PLAN_MAX_OWNERS owners. */
#define SCHED_SHARE 12
/* Fixed point of the per-load-unit expert time: 2^20. A layer's full
 * expert time is at most 2^40 ns (SCHED__TMAX) and its load at most
 * 12 x 2^20 units (counts renormalised to 2^20; uniform: 12 x 4096), so
 * unit x load <= 2^60 + load: no overflow in 64 bits. */
#define SCHED_EUNIT_SHIFT SCHED__EUNIT_SHIFT

/* ---- the context ------------------------------------------------------- */

static shoal_err check_manifest(const shoal_manifest *m, char *why, size_t why_len)
{
	if (!m->n_layer || m->n_layer > SCHED_MAX_LAYERS || !m->layers)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "manifest: %u layers", m->n_layer);
	for (uint32_t l = 0; l < m->n_layer; l++) {
		const shoal_manifest_layer *y = &m->layers[l];
		if (y->n_expert > SCHED_MAX_EXPERTS || y->n_expert_used > y->n_expert ||
		    (y->n_expert && !y->n_expert_used))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "manifest: layer %u routes %u of %u experts", l,
			                 y->n_expert_used, y->n_expert);
		if (y->bytes > SCHED_MAX_BYTES || y->flops > SCHED_MAX_BYTES ||
		    y->expert_bytes > SCHED_MAX_BYTES / SCHED_MAX_EXPERTS ||
		    y->expert_flops > SCHED_MAX_BYTES / SCHED_MAX_EXPERTS ||
		    y->kv_bytes_per_token > (1ULL << 30) || y->attn_flops_per_ctx > (1ULL << 30))
			return shoal_why(why, why_len, SHOAL_ERR_RANGE,
			                 "manifest: layer %u has implausible sizes", l);
	}
	uint64_t slots = 0;
	for (uint32_t l = 0; l < m->n_layer; l++)
		slots += m->layers[l].n_expert;
	if (slots > SCHED_MAX_SLOTS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "manifest: %llu experts in all, at most %u",
		                 (unsigned long long)slots, SCHED_MAX_SLOTS);
	if (m->embd_bytes > SCHED_MAX_BYTES || m->head_bytes > SCHED_MAX_BYTES ||
	    m->head_flops > SCHED_MAX_BYTES || m->act_bytes_per_token > (1ULL << 32) ||
	    m->mtp_bytes > SCHED_MAX_BYTES || m->mtp_kv_bytes_per_token > (1ULL << 30))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE,
		                 "manifest: implausible embedding, head or MTP layer sizes");
	return SHOAL_OK;
}

/* bytes less the policy's headroom (permille) */
static uint64_t headroom(uint64_t bytes, uint32_t permille)
{
	return bytes / 1000 * (1000 - permille) + bytes % 1000 * (1000 - permille) / 1000;
}

/* x scaled by an efficiency in permille (0: 1000, unscaled), at least 1 */
static uint64_t scale_pm(uint64_t x, uint32_t pm)
{
	if (!pm || pm >= 1000)
		return x;
	uint64_t y = x / 1000 * pm + x % 1000 * pm / 1000;
	return y ? y : 1;
}

/* Peer p's tables for one of its devices (bw B/s, fl FLOP/s): per layer
 * its base and expert times and their prefix (rows of tbase, texp, efull,
 * eunit, tpre in the (n, L) and (n, L+1) tables given) and the head's time.
 * Experts: the time of all n_expert_used experts of a token (the device's
 * roofline), and that time per load unit in fixed point, so that a share
 * costs one 64-bit multiply (the LPT placement asks this for every expert x
 * peer x layer: 950 k times for DeepSeek-V3 on 64 peers). */
static void dev_times(sched__ctx *c, size_t p, uint64_t bw, uint64_t fl, uint64_t *tbase,
                      uint64_t *texp, uint64_t *efull, uint64_t *eunit, uint64_t *tpre,
                      uint64_t *head_t)
{
	const shoal_manifest *m = c->m;
	uint32_t L = c->L;
	uint64_t acc = 0;
	for (uint32_t l = 0; l < L; l++) {
		const shoal_manifest_layer *y = &m->layers[l];
		size_t i = p * L + l;
		if (y->n_expert) {
			uint64_t full = sched__roofline(y->expert_bytes * y->n_expert_used,
			                                y->expert_flops * y->n_expert_used, bw, fl);
			efull[i] = full;
			/* ceil(full x 2^20 / loadtot), clamped to a unit time */
			uint64_t u =
			    sched__muldiv_up(full, 1ULL << SCHED_EUNIT_SHIFT, c->loadtot[l]);
			eunit[i] = u > SCHED__TMAX ? SCHED__TMAX : u;
		}
		uint64_t af =
		    y->attn_flops_per_ctx ? y->attn_flops_per_ctx : y->kv_bytes_per_token / 2;
		uint64_t ctx = shoal_manifest_kv_ctx(y, c->pol->ctx);
		uint64_t bytes = sched__add(y->bytes, sched__mul(y->kv_bytes_per_token, ctx));
		uint64_t flops = sched__add(y->flops, sched__mul(af, ctx));
		tbase[i] = sched__roofline(bytes, flops, bw, fl);
		texp[i] = y->n_expert ? efull[i] : 0;
		acc += tbase[i] + texp[i];
		tpre[p * (L + 1) + l + 1] = acc;
	}
	head_t[p] = sched__roofline(m->head_bytes, m->head_flops, bw, fl);
}

/* DeepSeek's MTP layer with the head, when a peer of the view offers it
 * and the model has one: the head peer holds its weights and its KV for
 * the policy's context and sessions, and the embedding where the layer
 * shares it and the head does not hold it (a tied head is the embedding;
 * a first stage holds it anyway). Its time is not predicted: it runs once
 * per step, and what its guesses save, the prediction does not model
 * either. Without such a peer every figure stays as it was. */
static void mtp_mem(sched__ctx *c)
{
	const shoal_manifest *m = c->m;
	for (size_t p = 0; p < c->n && m->mtp_bytes; p++)
		c->mtp |= shoal_view_peer_at(c->v, p)->mtp;
	if (!c->mtp)
		return;
	uint64_t kv =
	    sched__mul(sched__mul(m->mtp_kv_bytes_per_token, c->pol->ctx), c->pol->sessions);
	c->mtp_first = sched__add(m->mtp_bytes, kv);
	c->mtp_mem =
	    sched__add(c->mtp_first, m->mtp_shares_embd && !m->tied_head ? m->embd_bytes : 0);
	c->head_mem = sched__add(c->head_mem, c->mtp_mem);
	c->both_mem = sched__add(c->both_mem, c->mtp_first);
}

shoal_err sched__ctx_init(sched__ctx *c, const shoal_view *v, const shoal_manifest *m,
                          const shoal_policy *pol, char *why, size_t why_len)
{
	memset(c, 0, sizeof *c);
	shoal_err e = check_manifest(m, why, why_len);
	if (e)
		return e;
	if (!shoal_view_n_peers(v))
		return shoal_why(why, why_len, SHOAL_ERR_INFEASIBLE, "the view has no peers");
	if (pol->ctx > (1u << 24) || !pol->sessions || pol->sessions > 4096 ||
	    pol->headroom_permille > 900 || pol->gain_permille > 1000 || pol->near_permille > 1000)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "policy out of range");
	c->v = v;
	c->m = m;
	c->pol = pol;
	size_t n = c->n = shoal_view_n_peers(v);
	uint32_t L = c->L = m->n_layer;
	SCHED__ALLOC(c->cap, n);
	SCHED__ALLOC(c->bw, n);
	SCHED__ALLOC(c->fl, n);
	SCHED__ALLOC(c->hop, n * n);
	SCHED__ALLOC(c->rtt, n * n);
	SCHED__ALLOC(c->send, n * n);
	SCHED__ALLOC(c->tbase, n * L);
	SCHED__ALLOC(c->texp, n * L);
	SCHED__ALLOC(c->tpre, n * (L + 1));
	SCHED__ALLOC(c->head_t, n);
	SCHED__ALLOC(c->kv, L);
	SCHED__ALLOC(c->mpre[0], L + 1);
	SCHED__ALLOC(c->mpre[1], L + 1);
	SCHED__ALLOC(c->slot0, L);
	SCHED__ALLOC(c->loadtot, L);
	SCHED__ALLOC(c->gcap, n);
	SCHED__ALLOC(c->gbw, n);
	SCHED__ALLOC(c->gfl, n);
	SCHED__ALLOC(c->unified, n);
	SCHED__ALLOC(c->tcap, n);
	SCHED__ALLOC(c->gend[0], n * (L + 1));
	SCHED__ALLOC(c->gend[1], n * (L + 1));
	SCHED__ALLOC(c->gtbase, n * L);
	SCHED__ALLOC(c->gtexp, n * L);
	SCHED__ALLOC(c->gefull, n * L);
	SCHED__ALLOC(c->geunit, n * L);
	SCHED__ALLOC(c->gtpre, n * (L + 1));
	SCHED__ALLOC(c->ghead_t, n);
	SCHED__ALLOC(c->tpbw, n);
	SCHED__ALLOC(c->tpfl, n);
	SCHED__ALLOC(c->hop_in, n);
	SCHED__ALLOC(c->round_in, n);

	for (size_t p = 0; p < n; p++) {
		const shoal_view_peer *vp = shoal_view_peer_at(v, p);
		uint64_t keep = 100 - vp->load_pct;
		c->cap[p] = headroom(vp->mem_bytes, pol->headroom_permille);
		uint64_t bw = vp->mem_bw > SCHED_RATE_MAX ? SCHED_RATE_MAX : vp->mem_bw;
		uint64_t fl = vp->flops > SCHED_RATE_MAX ? SCHED_RATE_MAX : vp->flops;
		bw = scale_pm(bw, vp->bw_eff_pm);
		fl = scale_pm(fl, vp->fl_eff_pm);
		c->bw[p] = bw / 100 * keep + bw % 100 * keep / 100;
		c->fl[p] = fl / 100 * keep + fl % 100 * keep / 100;
		if (!c->bw[p])
			c->bw[p] = 1;
		if (!c->fl[p])
			c->fl[p] = 1;
		/* the GPU: the same headroom; load is the CPU's runnable work
		 * and leaves its figures alone; a unified GPU's memory is
		 * within the host's */
		c->gcap[p] = headroom(vp->gpu_mem, pol->headroom_permille);
		c->unified[p] = vp->gpu_unified;
		if (c->unified[p] && c->gcap[p] > c->cap[p])
			c->gcap[p] = c->cap[p];
		c->gbw[p] = scale_pm(vp->gpu_bw > SCHED_RATE_MAX ? SCHED_RATE_MAX : vp->gpu_bw,
		                     vp->gpu_bw_eff_pm);
		c->gfl[p] =
		    scale_pm(vp->gpu_flops > SCHED_RATE_MAX ? SCHED_RATE_MAX : vp->gpu_flops,
		             vp->gpu_fl_eff_pm);
		if (!c->gbw[p] || !c->gfl[p])
			c->gcap[p] = 0; /* the view refuses that; a GPU at 0 is none */
		c->tcap[p] = c->unified[p] ? c->cap[p] : sched__add(c->cap[p], c->gcap[p]);
		/* a tensor group's member computes on a unified GPU (its share
		 * is in host memory either way), else on its CPU */
		bool tg = c->gcap[p] && c->unified[p];
		c->tpbw[p] = tg ? c->gbw[p] : c->bw[p];
		c->tpfl[p] = tg ? c->gfl[p] : c->fl[p];
		c->hop_in[p] = vp->hop_ns;
		c->round_in[p] = vp->round_ns;
	}
	for (size_t p = 0; p < n; p++)
		for (size_t q = 0; q < n; q++) {
			if (p == q)
				continue;
			uint64_t lat, lbw;
			shoal_view_link(v, p, q, &lat, &lbw);
			if (lbw > SCHED_RATE_MAX)
				lbw = SCHED_RATE_MAX;
			/* the link, then what q's engine pays to take the hop in */
			uint64_t h = sched__add(
			    sched__add(lat > SCHED__TMAX ? SCHED__TMAX : lat, c->hop_in[q]),
			    sched__xfer_ns(m->act_bytes_per_token, lbw));
			c->hop[p * n + q] = h;
			c->rtt[p * n + q] = 2 * h;
			c->send[p * n + q] = sched__xfer_ns(m->act_bytes_per_token, lbw);
		}

	/* memory and loads per layer */
	uint32_t slots = 0;
	for (uint32_t l = 0; l < L; l++) {
		const shoal_manifest_layer *y = &m->layers[l];
		c->kv[l] = sched__mul(
		    sched__mul(y->kv_bytes_per_token, shoal_manifest_kv_ctx(y, pol->ctx)),
		    pol->sessions);
		uint64_t base = sched__add(y->bytes, c->kv[l]);
		c->mpre[SCHED__SPREAD][l + 1] = sched__add(c->mpre[SCHED__SPREAD][l], base);
		c->mpre[SCHED__KEEP][l + 1] = sched__add(
		    c->mpre[SCHED__KEEP][l], sched__add(base, y->expert_bytes * y->n_expert));
		c->slot0[l] = slots;
		slots += y->n_expert;
	}
	c->n_slots = slots;
	/* Below 2^62 bytes in all (4 EiB: no cluster has it), no sum of
	 * memory saturates and every range difference is exact. */
	if (sched__add(c->mpre[SCHED__KEEP][L], sched__add(m->embd_bytes, m->head_bytes)) >=
	    (1ULL << 62)) {
		sched__ctx_fini(c);
		return shoal_why(why, why_len, SHOAL_ERR_INFEASIBLE,
		                 "needs more than 4 EiB (weights + KV for %u tokens x %u sessions)",
		                 pol->ctx, pol->sessions);
	}
	SCHED__ALLOC(c->load, slots);
	for (uint32_t l = 0; l < L; l++) {
		const shoal_manifest_layer *y = &m->layers[l];
		unsigned __int128 total = 0;
		bool known;
		if (shoal_view_layer_has_counts(v, l))
			for (uint32_t e = 0; e < y->n_expert; e++)
				total += shoal_view_expert_count(v, l, e, &known);
		uint64_t sum = 0;
		for (uint32_t e = 0; e < y->n_expert; e++) {
			uint64_t w = 1;
			if (total) {
				uint64_t cnt = shoal_view_expert_count(v, l, e, &known);
				w = (uint64_t)((unsigned __int128)cnt * SCHED_LOAD_SCALE / total);
			}
			c->load[c->slot0[l] + e] = w;
			sum += w;
		}
		c->loadtot[l] = sum * SCHED_SHARE;
	}

	/* per peer and layer, on its CPU and on its GPU */
	SCHED__ALLOC(c->efull, n * L);
	SCHED__ALLOC(c->eunit, n * L);
	for (size_t p = 0; p < n; p++) {
		dev_times(c, p, c->bw[p], c->fl[p], c->tbase, c->texp, c->efull, c->eunit, c->tpre,
		          c->head_t);
		if (c->gcap[p])
			dev_times(c, p, c->gbw[p], c->gfl[p], c->gtbase, c->gtexp, c->gefull,
			          c->geunit, c->gtpre, c->ghead_t);
	}
	c->embd_mem = m->embd_bytes;
	c->head_mem = m->head_bytes;
	/* where each GPU's layers end, from each first layer: two pointers
	 * over the memory prefix, O(L) per peer and mode */
	for (int md = 0; md < 2; md++)
		for (size_t p = 0; p < n; p++) {
			uint32_t *ge = c->gend[md] + p * (L + 1), g = 0;
			for (uint32_t a = 0; a <= L; a++) {
				if (g < a)
					g = a;
				while (c->gcap[p] && g < L &&
				       c->mpre[md][g + 1] - c->mpre[md][a] <= c->gcap[p])
					g++;
				ge[a] = g;
			}
		}
	if (m->tied_head)
		c->both_mem = m->embd_bytes +
		              (m->head_bytes > m->embd_bytes ? m->head_bytes - m->embd_bytes : 0);
	else
		c->both_mem = m->embd_bytes + m->head_bytes;
	mtp_mem(c);
	return SHOAL_OK;
nomem:
	sched__ctx_fini(c);
	return SHOAL_ERR_NOMEM;
}

void sched__ctx_fini(sched__ctx *c)
{
	free(c->cap);
	free(c->bw);
	free(c->fl);
	free(c->hop);
	free(c->rtt);
	free(c->send);
	free(c->tbase);
	free(c->texp);
	free(c->tpre);
	free(c->head_t);
	free(c->kv);
	free(c->mpre[0]);
	free(c->mpre[1]);
	free(c->slot0);
	free(c->load);
	free(c->loadtot);
	free(c->efull);
	free(c->eunit);
	free(c->gcap);
	free(c->gbw);
	free(c->gfl);
	free(c->unified);
	free(c->tcap);
	free(c->gend[0]);
	free(c->gend[1]);
	free(c->gtbase);
	free(c->gtexp);
	free(c->gefull);
	free(c->geunit);
	free(c->gtpre);
	free(c->ghead_t);
	free(c->tpbw);
	free(c->tpfl);
	free(c->hop_in);
	free(c->round_in);
	free(c->prev_gend);
	free(c->prev_base);
	free(c->prev_exp);
	if (c->has_prev)
		sched__asg_fini(&c->prev);
	memset(c, 0, sizeof *c);
}

uint64_t sched__range_mem(const sched__ctx *c, sched__mode mode, uint32_t a, uint32_t b, bool first,
                          bool last)
{
	uint64_t x = c->mpre[mode][b] - c->mpre[mode][a];
	uint64_t extra = first && last ? c->both_mem : first ? c->embd_mem : last ? c->head_mem : 0;
	return sched__add(x, extra);
}

/* ---- the previous plan ------------------------------------------------ */

bool sched__ctx_set_prev(sched__ctx *c, const shoal_plan *prev)
{
	if (!prev || prev->n_layer != c->L || prev->n_slots != c->n_slots ||
	    memcmp(prev->model_id, c->m->model_id, sizeof prev->model_id))
		return false;
	uint64_t bytes = c->m->embd_bytes + c->m->head_bytes;
	for (uint32_t l = 0; l < c->L; l++)
		bytes +=
		    c->m->layers[l].bytes + c->m->layers[l].expert_bytes * c->m->layers[l].n_expert;
	if (bytes != prev->model_bytes)
		return false; /* another model or quantization: nothing carries over */
	for (uint32_t l = 0; l < c->L; l++)
		if (prev->layer_n_expert[l] != c->m->layers[l].n_expert)
			return false;
	if (!prev->n_stages || prev->n_stages > c->L)
		return false;
	long *map = calloc(prev->n_peers ? prev->n_peers : 1, sizeof *map);
	if (!map)
		return false;
	/* peers that left map to UINT32_MAX: what they held counts as moved,
	 * and the previous plan is then infeasible */
	for (size_t i = 0; i < prev->n_peers; i++)
		if ((map[i] = shoal_view_find(c->v, &prev->peers[i].id)) < 0)
			c->prev_gone = true;
#define MAPPED(i) (map[i] < 0 ? UINT32_MAX : (uint32_t)map[i])
	if (sched__asg_init(&c->prev, c))
		goto fail;
	c->has_prev = true;
	c->prev_base = calloc((size_t)c->n * c->L, 1);
	c->prev_exp = calloc((size_t)c->n * c->L, sizeof *c->prev_exp);
	c->prev_gend = calloc(c->L, sizeof *c->prev_gend);
	if (!c->prev_base || !c->prev_exp || !c->prev_gend)
		goto fail;
	c->prev_head_gpu = prev->head_gpu;
	sched__asg *a = &c->prev;
	a->n_stages = (uint32_t)prev->n_stages;
	for (size_t i = 0; i < prev->n_stages; i++) {
		const shoal_plan_stage *s = &prev->stages[i];
		a->st_peer[i] = MAPPED(s->peer);
		a->st_first[i] = s->first_layer;
		a->st_end[i] = s->end_layer;
		c->prev_gend[i] = s->gpu_end;
		if (map[s->peer] >= 0)
			for (uint32_t l = s->first_layer; l < s->end_layer; l++)
				c->prev_base[(size_t)map[s->peer] * c->L + l] = 1;
	}
	for (uint32_t l = 0; l < c->L; l++)
		for (uint32_t e = 0; e < c->m->layers[l].n_expert; e++) {
			uint32_t slot = c->slot0[l] + e;
			a->n_own[slot] = prev->slot_n_owner[slot];
			for (uint32_t k = 0; k < a->n_own[slot]; k++) {
				uint32_t o =
				    MAPPED(prev->slot_owner[slot * SHOAL_PLAN_MAX_OWNERS + k]);
				a->own[slot * SHOAL_PLAN_MAX_OWNERS + k] = o;
				if (o != UINT32_MAX)
					c->prev_exp[(size_t)o * c->L + l]++;
			}
		}
	/* its tensor groups, so that a plan with groups is kept as any other
	 * (planning anew would number a new epoch on every round) */
	if (prev->n_groups) {
		if (prev->n_groups > c->n || !(a->tp = sched__tp_new(c)))
			goto fail;
		for (uint32_t i = 0; i < a->n_stages; i++)
			a->tp->st_group[i] = UINT32_MAX;
		for (size_t g = 0; g < prev->n_groups; g++) {
			uint32_t st = prev->grp_stage[g], k = prev->grp_n[g];
			if (st >= a->n_stages || k > c->n)
				goto fail;
			a->tp->st_group[st] = (uint32_t)g;
			a->tp->g_n[g] = k;
			for (uint32_t j = 0; j < k; j++) {
				const shoal_plan_member *pm =
				    &prev->grp_mem[prev->grp_first[g] + j];
				a->tp->g_mem[g * c->n + j] = MAPPED(pm->peer);
				a->tp->g_w[g * c->n + j] = pm->weight;
				if (map[pm->peer] >= 0)
					for (uint32_t l = prev->stages[st].first_layer;
					     l < prev->stages[st].end_layer; l++)
						c->prev_base[(size_t)map[pm->peer] * c->L + l] = 1;
			}
		}
		a->tp->n_groups = (uint32_t)prev->n_groups;
	}
	c->prev_embd = MAPPED(prev->embd_peer);
	c->prev_head = MAPPED(prev->head_peer);
#undef MAPPED
	free(map);
	return true;
fail:
	free(map);
	free(c->prev_base);
	free(c->prev_exp);
	free(c->prev_gend);
	c->prev_base = NULL;
	c->prev_exp = NULL;
	c->prev_gend = NULL;
	if (c->has_prev)
		sched__asg_fini(&c->prev);
	c->has_prev = false;
	c->prev_gone = false;
	return false;
}

/* ---- evaluation -------------------------------------------------------- */

/* expert work w of layer l owned by o for stage peer s, on o's GPU when gpu
 * (then o == s: a stage's GPU runs only its own layers' experts) */
static uint64_t expert_time_on(const sched__ctx *c, bool gpu, uint32_t l, uint32_t s, uint32_t o,
                               uint64_t w)
{
	if (!gpu || o != s)
		return sched__expert_time(c, l, s, o, w);
	if (!w)
		return 0;
	size_t i = (size_t)o * c->L + l;
	return w == c->loadtot[l]
	           ? c->gefull[i]
	           : (w * c->geunit[i] + (1ULL << SCHED_EUNIT_SHIFT) - 1) >> SCHED_EUNIT_SHIFT;
}

/* Bytes of layer l on stage peer p: weights, KV and the experts p holds */
static uint64_t layer_bytes_on(const sched__ctx *c, const sched__asg *a, uint32_t l, uint32_t p)
{
	const shoal_manifest_layer *y = &c->m->layers[l];
	uint64_t b = sched__add(y->bytes, c->kv[l]);
	for (uint32_t e = 0; e < y->n_expert; e++) {
		uint32_t slot = c->slot0[l] + e;
		for (uint32_t j = 0; j < a->n_own[slot]; j++)
			if (a->own[slot * SHOAL_PLAN_MAX_OWNERS + j] == p)
				b = sched__add(b, y->expert_bytes);
	}
	return b;
}

static bool prev_owned(const sched__ctx *c, uint32_t slot, uint32_t o)
{
	for (uint32_t k = 0; k < c->prev.n_own[slot]; k++)
		if (c->prev.own[slot * SHOAL_PLAN_MAX_OWNERS + k] == o)
			return true;
	return false;
}

void sched__pipe_evaluate(const sched__ctx *c, sched__asg *a)
{
	size_t n = c->n;
	uint32_t L = c->L;
	const shoal_manifest *m = c->m;
	memset(a->mem_w, 0, n * sizeof *a->mem_w);
	memset(a->mem_kv, 0, n * sizeof *a->mem_kv);
	memset(a->n_exp, 0, n * sizeof *a->n_exp);
	memset(a->mem_g, 0, n * sizeof *a->mem_g);
	a->head_gpu = false;
	uint64_t t = 0, moved = 0, gused = 0;
	uint32_t first = a->st_peer[0], last = a->st_peer[a->n_stages - 1];
	uint64_t *w = calloc(n, sizeof *w);
	uint32_t *touched = calloc(n, sizeof *touched);
	uint8_t *seen = calloc(n, 1);
	if (!w || !touched || !seen) {
		/* Out of memory while judging: call the assignment infeasible,
		 * which is safe (nothing is adopted). */
		free(w);
		free(touched);
		free(seen);
		a->feasible = false;
		a->time_ns = SCHED__INF;
		return;
	}
	for (uint32_t i = 0; i < a->n_stages; i++) {
		uint32_t p = a->st_peer[i];
		if (i)
			t += c->hop[(size_t)a->st_peer[i - 1] * n + p];
		uint64_t t0 = t;
		/* the GPU takes the stage's first layers while they fit */
		bool gpu = c->gcap[p] > 0;
		gused = 0;
		a->st_gend[i] = a->st_first[i];
		for (uint32_t l = a->st_first[i]; l < a->st_end[i]; l++) {
			const shoal_manifest_layer *y = &m->layers[l];
			if (gpu) {
				uint64_t lb = layer_bytes_on(c, a, l, p);
				gpu = sched__add(gused, lb) <= c->gcap[p];
				if (gpu) {
					gused += lb;
					a->st_gend[i] = l + 1;
				}
			}
			a->mem_w[p] = sched__add(a->mem_w[p], y->bytes);
			a->mem_kv[p] = sched__add(a->mem_kv[p], c->kv[l]);
			t += (gpu ? c->gtbase : c->tbase)[(size_t)p * L + l];
			if (c->has_prev && !c->prev_base[(size_t)p * L + l])
				moved += y->bytes;
			if (!y->n_expert)
				continue;
			/* this layer's routed experts: each owner's share of
			 * the expected load, the slowest owner bounds it */
			uint32_t nt = 0;
			for (uint32_t e = 0; e < y->n_expert; e++) {
				uint32_t slot = c->slot0[l] + e;
				uint32_t k = a->n_own[slot];
				for (uint32_t j = 0; j < k; j++) {
					uint32_t o = a->own[slot * SHOAL_PLAN_MAX_OWNERS + j];
					if (!seen[o]) {
						seen[o] = 1;
						touched[nt++] = o;
					}
					w[o] += c->load[slot] * SCHED_SHARE / k;
					a->mem_w[o] = sched__add(a->mem_w[o], y->expert_bytes);
					a->n_exp[o]++;
					if (c->has_prev && !prev_owned(c, slot, o))
						moved += y->expert_bytes;
				}
			}
			uint64_t worst = 0, fan = 0;
			for (uint32_t j = 0; j < nt; j++) {
				uint32_t o = touched[j];
				uint64_t et = expert_time_on(c, gpu, l, p, o, w[o]);
				if (et > worst)
					worst = et;
				if (o != p && w[o])
					fan += c->send[(size_t)p * n + o];
				w[o] = 0;
				seen[o] = 0;
			}
			t += fan;
			t += worst;
		}
		a->mem_g[p] = sched__add(a->mem_g[p], gused);
		a->st_ns[i] = t - t0;
	}
	if (a->n_stages) {
		if (first == last) {
			a->mem_w[first] = sched__add(a->mem_w[first], c->both_mem);
		} else {
			a->mem_w[first] = sched__add(a->mem_w[first], c->embd_mem);
			a->mem_w[last] = sched__add(a->mem_w[last], c->head_mem);
		}
		/* the head on the GPU that ends the last stage, if it fits */
		uint32_t ls = a->n_stages - 1;
		a->head_gpu = c->gcap[last] && a->st_gend[ls] == a->st_end[ls] &&
		              sched__add(gused, c->head_mem) <= c->gcap[last];
		if (a->head_gpu) {
			a->mem_g[last] += c->head_mem;
			a->mem_w[last] += sched__head_copy(c, last, first == last);
		}
		uint64_t ht = a->head_gpu ? c->ghead_t[last] : c->head_t[last];
		t += ht;
		a->st_ns[ls] += ht;
		if (c->has_prev) {
			if (first != c->prev_embd)
				moved += m->embd_bytes;
			if (last != c->prev_head)
				moved += m->head_bytes + (c->mtp ? m->mtp_bytes : 0);
		}
	}
	if (!c->has_prev)
		for (size_t p = 0; p < n; p++)
			moved += a->mem_w[p];
	a->feasible = a->n_stages > 0;
	a->bad_peer = UINT32_MAX;
	for (size_t p = 0; p < n && a->feasible; p++)
		if (sched__host_bytes(c, (uint32_t)p, sched__add(a->mem_w[p], a->mem_kv[p]),
		                      a->mem_g[p]) > c->cap[p]) {
			a->feasible = false;
			a->bad_peer = (uint32_t)p;
		}
	a->time_ns = t;
	a->moved = moved;
	free(w);
	free(touched);
	free(seen);
}
