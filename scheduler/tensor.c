/*
 * scheduler/tensor.c: tensor groups: a stage whose layers are split among
 * several peers, each computing whole output elements of every matrix.
 *
 * Part: scheduler/ (pure). Divisions: groups, a group's layer, the search
 * over partitions, evaluation.
 *
 * The split (what runtime/engine/engine_tp.c executes): in each layer a
 * member computes the query heads of its KV heads (attention by KV-head
 * groups), then its columns of the attention output, its FFN columns (in
 * blocks of SHOAL_PLAN_TP_COLS) and its columns of the FFN output; every
 * share is shoal_plan_split of the members' speed weights. The residual
 * stream stays replicated. Synchronisation rounds (all-gathers) per layer:
 *   attention split by heads: 2 (the heads' outputs, then Wo's columns)
 *   dense FFN split by columns: 2 (silu(gate) * up, then down's columns)
 *   MoE FFN: 1 (the members' expert contributions); the experts of a group's
 *     layer are split among its members by the same weights, in id blocks
 * A part the manifest cannot split (no KV heads or FFN columns given) is
 * computed whole by every member and needs no round.
 *
 * Cost of a group's layer: max over members of the roofline of its share
 * (bytes and FLOPs of its heads and columns, its KV cache over the context;
 * on a member's unified GPU, else its CPU: cost.c's tpbw, tpfl), plus per
 * round the group's largest link latency, its slowest member's round cost
 * (view.h: round_ns; members send at once over a mesh, so it does not grow
 * with k) and (k-1)/k of the round's row at the group's smallest link
 * bandwidth. Weights: a member's
 * speed on this model, 2^50 / (its time for the whole model alone).
 * Memory: a member holds its shares; the embedding every member of the
 * first stage (the replicated stream starts from the token ids there).
 * The head of a group that runs the last stage is split by vocab rows too
 * (blocks of SHOAL_PLAN_TP_COLS, the same weights): each member holds the
 * final norm and its rows of the output matrix (of token_embd with a tied
 * head, nothing more where it embeds already), and the group's lead
 * (largest weight: the plan's head peer) gathers the logits and samples.
 * Its time: max over members of the roofline of their rows, plus one
 * gather round (the link latency and the lead's (V - its rows) x 4 bytes
 * at the smallest link bandwidth).
 *
 * Search: the partitions of the peers into groups by single linkage on link
 * latency (for each of the 8 smallest distinct latencies t, the components
 * of the links at most t apart), each planned by the ordinary search with a
 * group as one unit; the fastest exact evaluation wins. The result is then
 * one candidate among the pipeline plans of schedule.c, so the same choice
 * decides per link between tensor and pipeline splitting.
 */
#include "scheduler/sched_impl.h"

#include <stdlib.h>
#include <string.h>

/* 8 thresholds: single linkage merges at each distinct latency; links are
 * bucketed (view.h), so a cluster has few distinct values, and 8 searches
 * keep a 64-peer plan within a few times the pipeline search. */
#define TP_MAX_CUTS 8
/* Groups are looked for among at most 64 peers (the n^2 latency table and
 * 8 searches stay cheap); a larger view is planned as pipelines only. */
#define TP_MAX_PEERS 64
/* Speed weight numerator: 2^50 / ns keeps a 1 ns .. 2^40 ns model time
 * between 2^10 and 2^50. */
#define TP_WEIGHT_ONE (1ULL << 50)

/* ---- groups ------------------------------------------------------------ */

/* A unit of the search: one peer (k = 1) or a group. */
typedef struct tp_unit {
	uint32_t k;
	const uint32_t *mem; /* (k) view indices, ascending */
	const uint64_t *w;   /* (k) weights */
	uint64_t lat, bw;    /* the group's worst link */
	uint64_t rnd;        /* its slowest member's cost per round beyond the link */
} tp_unit;

static uint32_t unit_lead(const tp_unit *u)
{
	return sched__tp_lead_among(u->k, u->mem, u->w);
}

static void unit_links(const sched__ctx *c, tp_unit *u)
{
	u->lat = 0;
	u->bw = UINT64_MAX;
	u->rnd = 0;
	for (uint32_t i = 0; i < u->k; i++)
		if (c->round_in[u->mem[i]] > u->rnd)
			u->rnd = c->round_in[u->mem[i]];
	for (uint32_t i = 0; i < u->k; i++)
		for (uint32_t j = i + 1; j < u->k; j++) {
			uint64_t lat, bw;
			shoal_view_link(c->v, u->mem[i], u->mem[j], &lat, &bw);
			if (lat > u->lat)
				u->lat = lat;
			if (bw < u->bw)
				u->bw = bw;
		}
}

/* The hidden state into unit b from unit a: every member of b needs it and
 * every member of a has it, so each b member takes its nearest a member. */
static uint64_t unit_hop(const sched__ctx *c, const tp_unit *a, const tp_unit *b)
{
	uint64_t worst = 0;
	for (uint32_t j = 0; j < b->k; j++) {
		uint64_t best = SCHED__INF;
		for (uint32_t i = 0; i < a->k; i++) {
			uint64_t h = a->mem[i] == b->mem[j]
			                 ? 0
			                 : c->hop[(size_t)a->mem[i] * c->n + b->mem[j]];
			if (h < best)
				best = h;
		}
		if (best > worst)
			worst = best;
	}
	return worst;
}

/* ---- a group's layer ---------------------------------------------------- */

/* One all-gather of a row of `bytes` within the unit. */
static uint64_t round_ns(const tp_unit *u, uint64_t bytes)
{
	uint64_t share = bytes / u->k * (u->k - 1) + bytes % u->k * (u->k - 1) / u->k;
	return sched__add(sched__add(u->lat, u->rnd), sched__xfer_ns(share, u->bw));
}

/* Expert work w of layer l on group member p: on its GPU where it
 * computes there (cost.c: tpbw), else as cost.c says for its CPU. */
static uint64_t member_expert_time(const sched__ctx *c, uint32_t l, uint32_t p, uint64_t w)
{
	if (!w || !c->gcap[p] || !c->unified[p])
		return sched__expert_time(c, l, p, p, w);
	size_t i = (size_t)p * c->L + l;
	return w == c->loadtot[l]
	           ? c->gefull[i]
	           : (w * c->geunit[i] + (1ULL << SCHED__EUNIT_SHIFT) - 1) >> SCHED__EUNIT_SHIFT;
}

/* Layer l on unit u: *t_base (attention, dense FFN or router, rounds),
 * *t_exp (routed experts, their round); with mw, mk, ne (k) non-NULL the
 * members' weights, KV and experts are added there. A one-peer unit costs
 * what cost.c says (experts kept with the layer). */
static void unit_layer(const sched__ctx *c, const tp_unit *u, uint32_t l, uint64_t *t_base,
                       uint64_t *t_exp, uint64_t *mw, uint64_t *mk, uint32_t *ne)
{
	const shoal_manifest_layer *y = &c->m->layers[l];
	uint32_t k = u->k, L = c->L;
	if (k == 1) {
		uint32_t p = u->mem[0];
		*t_base = c->tbase[(size_t)p * L + l];
		*t_exp = c->texp[(size_t)p * L + l];
		if (mw) {
			mw[0] =
			    sched__add(mw[0], sched__add(y->bytes, y->expert_bytes * y->n_expert));
			mk[0] = sched__add(mk[0], c->kv[l]);
			ne[0] += y->n_expert;
		}
		return;
	}
	uint32_t hf[TP_MAX_PEERS], hc[TP_MAX_PEERS], bf[TP_MAX_PEERS], bc[TP_MAX_PEERS];
	uint32_t H = y->n_head_kv, F = y->n_expert ? 0 : y->n_ff;
	uint32_t B = (F + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS;
	if (H)
		shoal_plan_split(u->w, k, H, hf, hc);
	if (B)
		shoal_plan_split(u->w, k, B, bf, bc);
	uint64_t attn = y->attn_bytes < y->bytes ? y->attn_bytes : y->bytes;
	uint64_t rest = y->bytes - attn;
	uint64_t af = y->attn_flops_per_ctx ? y->attn_flops_per_ctx : y->kv_bytes_per_token / 2;
	uint64_t ctx = shoal_manifest_kv_ctx(y, c->pol->ctx);
	uint64_t kvctx = y->kv_bytes_per_token * ctx, afctx = af * ctx;
	uint64_t worst = 0;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t p = u->mem[i];
		/* shares as num / den */
		uint64_t an = H ? hc[i] : 1, ad = H ? H : 1, fn = 1, fd = 1;
		if (B) {
			uint32_t c0 = bf[i] * SHOAL_PLAN_TP_COLS,
			         c1 = (bf[i] + bc[i]) * SHOAL_PLAN_TP_COLS;
			fn = (c1 > F ? F : c1) - (c0 > F ? F : c0);
			fd = F;
		}
		uint64_t wb =
		    sched__add(sched__muldiv_up(attn, an, ad), sched__muldiv_up(rest, fn, fd));
		uint64_t wf = y->bytes ? sched__muldiv_up(y->flops, wb, y->bytes) : 0;
		uint64_t t = sched__roofline(sched__add(wb, sched__muldiv_up(kvctx, an, ad)),
		                             sched__add(wf, sched__muldiv_up(afctx, an, ad)),
		                             c->tpbw[p], c->tpfl[p]);
		if (t > worst)
			worst = t;
		if (mw) {
			mw[i] = sched__add(mw[i], wb);
			mk[i] = sched__add(mk[i], sched__muldiv_up(c->kv[l], an, ad));
		}
	}
	uint64_t row = c->m->act_bytes_per_token;
	if (H)
		worst = sched__add(worst, 2 * round_ns(u, row));
	if (B)
		worst =
		    sched__add(worst, sched__add(round_ns(u, (uint64_t)F * 4), round_ns(u, row)));
	*t_base = worst;
	*t_exp = 0;
	if (!y->n_expert)
		return;
	uint32_t ef[TP_MAX_PEERS], ec[TP_MAX_PEERS];
	shoal_plan_split(u->w, k, y->n_expert, ef, ec);
	uint64_t ew = 0;
	for (uint32_t i = 0; i < k; i++) {
		uint64_t units = 0;
		for (uint32_t x = ef[i]; x < ef[i] + ec[i]; x++)
			units += c->load[c->slot0[l] + x] * 12; /* SCHED_SHARE */
		uint64_t t = member_expert_time(c, l, u->mem[i], units);
		if (t > ew)
			ew = t;
		if (mw) {
			mw[i] = sched__add(mw[i], y->expert_bytes * ec[i]);
			ne[i] += ec[i];
		}
	}
	*t_exp = sched__add(ew, round_ns(u, row * y->n_expert_used));
}

/* The head on unit u (its last stage): the time, and with mw (k) non-NULL
 * each member's bytes added there; emb (k) or NULL says which members
 * embed already (the first stage: a tied head's matrix is the embedding).
 * One peer: what cost.c says. */
static uint64_t unit_head(const sched__ctx *c, const tp_unit *u, const bool *emb, uint64_t *mw)
{
	const shoal_manifest *m = c->m;
	uint32_t V = m->n_vocab, B = (V + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS;
	if (u->k == 1 || !B) { /* whole on the lead */
		uint32_t j = 0;
		while (u->mem[j] != unit_lead(u))
			j++;
		if (mw)
			mw[j] = sched__add(mw[j],
			                   emb && emb[j] ? c->both_mem - c->embd_mem : c->head_mem);
		return c->head_t[u->mem[j]];
	}
	/* the final norm beside the matrix: its F32 row (the tied head's
	 * surplus over the embedding, where the manifest says) */
	uint64_t norm = m->tied_head
	                    ? c->both_mem - c->embd_mem
	                    : (m->head_bytes < 4ULL * m->n_embd ? m->head_bytes : 4ULL * m->n_embd);
	uint64_t mat = m->tied_head ? m->embd_bytes : m->head_bytes - norm;
	uint32_t bf[TP_MAX_PEERS], bc[TP_MAX_PEERS];
	shoal_plan_split(u->w, u->k, B, bf, bc);
	uint64_t worst = 0, rest = 0;
	uint32_t lead = unit_lead(u);
	for (uint32_t i = 0; i < u->k; i++) {
		uint32_t r0 = bf[i] * SHOAL_PLAN_TP_COLS, r1 = (bf[i] + bc[i]) * SHOAL_PLAN_TP_COLS;
		uint32_t rows = (r1 > V ? V : r1) - (r0 > V ? V : r0);
		uint64_t wb = sched__add(sched__muldiv_up(mat, rows, V), norm);
		uint64_t t = sched__roofline(wb, sched__muldiv_up(m->head_flops, rows, V),
		                             c->tpbw[u->mem[i]], c->tpfl[u->mem[i]]);
		if (t > worst)
			worst = t;
		if (u->mem[i] != lead)
			rest += rows;
		if (mw)
			mw[i] = sched__add(mw[i], m->tied_head && emb && emb[i] ? norm : wb);
		/* the MTP layer runs whole on the lead, which samples */
		if (mw && c->mtp && u->mem[i] == lead)
			mw[i] = sched__add(mw[i], emb && emb[i] ? c->mtp_first : c->mtp_mem);
	}
	return sched__add(worst, sched__add(u->lat, sched__xfer_ns(rest * 4, u->bw)));
}

/* ---- the search over partitions ----------------------------------------- */

static uint32_t uf_find(uint32_t *par, uint32_t x)
{
	while (par[x] != x)
		x = par[x] = par[par[x]];
	return x;
}

static int u64_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* Units of one partition: comp[p] = the lowest index of p's component. */
typedef struct tp_part {
	uint32_t nu;
	tp_unit *u;    /* (nu) in order of their lowest member */
	uint32_t *mem; /* (n) members, unit after unit */
	uint64_t *w;   /* (n) */
} tp_part;

/* Shares bounded by memory: the member weights of a group are its speeds
 * unless the model's layers, split by speed, would overfill a member; then
 * (water-filling) such members get their memory as their share of bytes,
 * and the rest of the bytes go to the others in proportion to speed. The
 * weights are then bytes. (The group may hold only a part of the model in
 * a pipeline; bounding against the whole model is the safe side.) */
static void bound_by_memory(const sched__ctx *c, uint32_t k, const uint32_t *mem, uint64_t *w)
{
	uint64_t need = sched__range_mem(c, SCHED__KEEP, 0, c->L, false, false);
	uint64_t cap[TP_MAX_PEERS], share[TP_MAX_PEERS];
	bool fixed[TP_MAX_PEERS] = {false}, any = false, again = true;
	/* whole heads, blocks and experts round a share up by at most one
	 * unit of each per layer; the embedding and the head come on top */
	uint64_t slack = sched__add(c->embd_mem, c->head_mem);
	for (uint32_t l = 0; l < c->L; l++) {
		const shoal_manifest_layer *y = &c->m->layers[l];
		uint64_t attn = y->attn_bytes < y->bytes ? y->attn_bytes : y->bytes;
		uint32_t blocks = (y->n_ff + SHOAL_PLAN_TP_COLS - 1) / SHOAL_PLAN_TP_COLS;
		if (y->n_head_kv)
			slack = sched__add(slack, (attn + c->kv[l]) / y->n_head_kv + 1);
		if (blocks && !y->n_expert)
			slack = sched__add(slack, (y->bytes - attn) / blocks + 1);
		slack = sched__add(slack, y->expert_bytes);
	}
	for (uint32_t i = 0; i < k; i++) {
		uint64_t cp = c->cap[mem[i]];
		cap[i] = cp > slack ? cp - slack : 1;
	}
	while (again) {
		again = false;
		uint64_t rest = need;
		unsigned __int128 wf = 0;
		for (uint32_t i = 0; i < k; i++) {
			if (fixed[i])
				rest = rest > cap[i] ? rest - cap[i] : 0;
			else
				wf += w[i];
		}
		for (uint32_t i = 0; i < k; i++) {
			if (fixed[i]) {
				share[i] = cap[i];
				continue;
			}
			unsigned __int128 q = wf ? (unsigned __int128)rest * w[i] / wf : 0;
			share[i] = q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
			if (share[i] > cap[i]) {
				fixed[i] = any = again = true;
				break;
			}
		}
	}
	if (!any)
		return;
	for (uint32_t i = 0; i < k; i++)
		w[i] = share[i] ? share[i] : 1;
}

static void part_build(const sched__ctx *c, const uint32_t *comp, const uint64_t *wt, tp_part *pt)
{
	uint32_t n = (uint32_t)c->n, at = 0;
	pt->nu = 0;
	for (uint32_t r = 0; r < n; r++) {
		if (comp[r] != r)
			continue;
		tp_unit *u = &pt->u[pt->nu++];
		u->mem = pt->mem + at;
		u->w = pt->w + at;
		u->k = 0;
		for (uint32_t p = r; p < n; p++)
			if (comp[p] == r) {
				pt->mem[at] = p;
				pt->w[at++] = wt[p];
				u->k++;
			}
		if (u->k > 1)
			bound_by_memory(c, u->k, u->mem, (uint64_t *)u->w);
		unit_links(c, u);
	}
}

/* The assignment of the virtual search's stages over units, in view
 * indices, with its groups and experts. */
static bool part_expand(const sched__ctx *c, const tp_part *pt, const sched__asg *va, sched__asg *a)
{
	if (!a->tp && !(a->tp = sched__tp_new(c)))
		return false;
	sched__tp *t = a->tp;
	size_t n = c->n;
	t->n_groups = 0;
	a->n_stages = va->n_stages;
	memset(a->n_own, 0, c->n_slots);
	for (uint32_t i = 0; i < va->n_stages; i++) {
		const tp_unit *u = &pt->u[va->st_peer[i]];
		a->st_peer[i] = u->mem[0];
		a->st_first[i] = va->st_first[i];
		a->st_end[i] = va->st_end[i];
		t->st_group[i] = UINT32_MAX;
		uint32_t ef[TP_MAX_PEERS], ec[TP_MAX_PEERS];
		if (u->k > 1) {
			uint32_t g = t->n_groups++;
			t->st_group[i] = g;
			t->g_n[g] = u->k;
			memcpy(t->g_mem + (size_t)g * n, u->mem, u->k * sizeof *u->mem);
			memcpy(t->g_w + (size_t)g * n, u->w, u->k * sizeof *u->w);
		}
		for (uint32_t l = a->st_first[i]; l < a->st_end[i]; l++) {
			uint32_t E = c->m->layers[l].n_expert;
			if (!E)
				continue;
			if (u->k > 1)
				shoal_plan_split(u->w, u->k, E, ef, ec);
			for (uint32_t j = 0, x = 0; x < E; x++) {
				uint32_t slot = c->slot0[l] + x;
				if (u->k > 1)
					while (x >= ef[j] + ec[j])
						j++;
				a->n_own[slot] = 1;
				a->own[slot * SHOAL_PLAN_MAX_OWNERS] =
				    (uint16_t)u->mem[u->k > 1 ? j : 0];
			}
		}
	}
	return true;
}

/* Plan one partition with the ordinary search over its units. */
static bool part_search(const sched__ctx *c, const tp_part *pt, sched__asg *a)
{
	uint32_t nu = pt->nu, L = c->L;
	sched__ctx vc;
	memset(&vc, 0, sizeof vc);
	vc.v = c->v;
	vc.m = c->m;
	vc.pol = c->pol;
	vc.n = nu;
	vc.L = L;
	vc.mpre[0] = c->mpre[0];
	vc.mpre[1] = c->mpre[1];
	vc.embd_mem = c->embd_mem;
	vc.head_mem = c->head_mem;
	vc.both_mem = c->both_mem;
	vc.cap = calloc(nu, sizeof *vc.cap);
	vc.head_t = calloc(nu, sizeof *vc.head_t);
	vc.hop = calloc((size_t)nu * nu, sizeof *vc.hop);
	vc.tpre = calloc((size_t)nu * (L + 1), sizeof *vc.tpre);
	/* units compute on their CPUs: no GPU (zero gcap), tcap = cap */
	vc.gcap = calloc(nu, sizeof *vc.gcap);
	vc.gtpre = calloc((size_t)nu * (L + 1), sizeof *vc.gtpre);
	vc.tcap = vc.cap;
	sched__asg va;
	bool ok = false;
	if (!vc.cap || !vc.head_t || !vc.hop || !vc.tpre || !vc.gcap || !vc.gtpre ||
	    sched__asg_init(&va, &vc))
		goto out;
	for (uint32_t x = 0; x < nu; x++) {
		const tp_unit *u = &pt->u[x];
		/* memory: the share of a range each member holds is about its
		 * weight's share, so the unit holds what its tightest member
		 * allows (the exact check is sched__tp_evaluate's) */
		unsigned __int128 W = 0;
		for (uint32_t j = 0; j < u->k; j++)
			W += u->w[j];
		uint64_t cap = UINT64_MAX;
		for (uint32_t j = 0; j < u->k; j++) {
			unsigned __int128 q = (unsigned __int128)c->cap[u->mem[j]] * W / u->w[j];
			uint64_t v = q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
			if (v < cap)
				cap = v;
		}
		vc.cap[x] = cap;
		vc.head_t[x] = unit_head(c, u, NULL, NULL);
		uint64_t acc = 0;
		for (uint32_t l = 0; l < L; l++) {
			uint64_t tb, te;
			unit_layer(c, u, l, &tb, &te, NULL, NULL, NULL);
			acc += tb + te;
			vc.tpre[(size_t)x * (L + 1) + l + 1] = acc;
		}
		for (uint32_t z = 0; z < nu; z++)
			if (z != x)
				vc.hop[(size_t)x * nu + z] = unit_hop(c, u, &pt->u[z]);
	}
	if (sched__search(&vc, SCHED__KEEP, 0, 1, &va) && part_expand(c, pt, &va, a)) {
		sched__tp_evaluate(c, a);
		ok = a->feasible;
	}
	sched__asg_fini(&va);
out:
	free(vc.cap);
	free(vc.head_t);
	free(vc.hop);
	free(vc.tpre);
	free(vc.gcap);
	free(vc.gtpre);
	return ok;
}

bool sched__tensor_search(const sched__ctx *c, sched__asg *a)
{
	uint32_t n = (uint32_t)c->n, L = c->L;
	if (n < 2 || n > TP_MAX_PEERS)
		return false;
	size_t np = (size_t)n * (n - 1) / 2;
	uint64_t *lats = malloc(np * sizeof *lats), *wt = malloc(n * sizeof *wt);
	uint32_t *comp = malloc(n * sizeof *comp), *prevc = malloc(n * sizeof *prevc);
	tp_part pt = {0};
	pt.u = malloc(n * sizeof *pt.u);
	pt.mem = malloc(n * sizeof *pt.mem);
	pt.w = malloc(n * sizeof *pt.w);
	sched__asg tmp;
	bool found = false, tmp_ok = false;
	if (!lats || !wt || !comp || !prevc || !pt.u || !pt.mem || !pt.w)
		goto out;
	if (sched__asg_init(&tmp, c))
		goto out;
	tmp_ok = true;
	for (uint32_t p = 0; p < n; p++) {
		uint64_t t = c->tpre[(size_t)p * (L + 1) + L] + c->head_t[p];
		wt[p] = TP_WEIGHT_ONE / (t ? t : 1);
		if (!wt[p])
			wt[p] = 1;
		prevc[p] = p;
	}
	size_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i + 1; j < n; j++) {
			uint64_t bw;
			shoal_view_link(c->v, i, j, &lats[k++], &bw);
		}
	qsort(lats, np, sizeof *lats, u64_cmp);
	uint32_t cuts = 0;
	for (size_t x = 0; x < np && cuts < TP_MAX_CUTS; x++) {
		if (x && lats[x] == lats[x - 1])
			continue;
		cuts++;
		for (uint32_t p = 0; p < n; p++)
			comp[p] = p;
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = i + 1; j < n; j++) {
				uint64_t lat, bw;
				shoal_view_link(c->v, i, j, &lat, &bw);
				if (lat > lats[x])
					continue;
				uint32_t ri = uf_find(comp, i), rj = uf_find(comp, j);
				if (ri != rj)
					comp[ri > rj ? ri : rj] = ri < rj ? ri : rj;
			}
		for (uint32_t p = 0; p < n; p++)
			comp[p] = uf_find(comp, p);
		if (!memcmp(comp, prevc, n * sizeof *comp))
			continue; /* the same partition as the last cut */
		memcpy(prevc, comp, n * sizeof *comp);
		part_build(c, comp, wt, &pt);
		if (!part_search(c, &pt, &tmp))
			continue;
		if (!found || tmp.time_ns < a->time_ns) {
			sched__asg_copy(a, &tmp, c);
			found = a->feasible;
		}
	}
out:
	if (tmp_ok)
		sched__asg_fini(&tmp);
	free(lats);
	free(wt);
	free(comp);
	free(prevc);
	free(pt.u);
	free(pt.mem);
	free(pt.w);
	return found;
}

/* ---- evaluation ---------------------------------------------------------- */

void sched__tp_evaluate(const sched__ctx *c, sched__asg *a)
{
	size_t n = c->n;
	const sched__tp *t = a->tp;
	memset(a->mem_w, 0, n * sizeof *a->mem_w);
	memset(a->mem_kv, 0, n * sizeof *a->mem_kv);
	memset(a->n_exp, 0, n * sizeof *a->n_exp);
	a->feasible = a->n_stages > 0;
	a->time_ns = SCHED__INF;
	a->bad_peer = UINT32_MAX;
	if (!a->feasible)
		return;
	uint64_t time = 0, moved = 0;
	tp_unit first = {0}, prev = {0}, cur = {0};
	uint64_t one = 1;
	for (uint32_t i = 0; i < a->n_stages; i++) {
		uint32_t g = t->st_group[i];
		if (g == UINT32_MAX)
			cur = (tp_unit){1, &a->st_peer[i], &one, 0, 0};
		else {
			cur = (tp_unit){t->g_n[g], t->g_mem + (size_t)g * n, t->g_w + (size_t)g * n,
			                0, 0};
			unit_links(c, &cur);
		}
		if (i)
			time = sched__add(time, unit_hop(c, &prev, &cur));
		uint64_t mw[TP_MAX_PEERS] = {0}, mk[TP_MAX_PEERS] = {0};
		uint32_t ne[TP_MAX_PEERS] = {0};
		uint64_t t0 = time;
		for (uint32_t l = a->st_first[i]; l < a->st_end[i]; l++) {
			uint64_t tb, te;
			unit_layer(c, &cur, l, &tb, &te, mw, mk, ne);
			time = sched__add(time, sched__add(tb, te));
			for (uint32_t j = 0; c->has_prev && j < cur.k; j++)
				if (!c->prev_base[(size_t)cur.mem[j] * c->L + l])
					moved += c->m->layers[l].bytes / cur.k;
		}
		for (uint32_t j = 0; j < cur.k; j++) {
			uint32_t p = cur.mem[j];
			a->mem_w[p] = sched__add(a->mem_w[p], mw[j]);
			a->mem_kv[p] = sched__add(a->mem_kv[p], mk[j]);
			a->n_exp[p] += ne[j];
			if (i == 0)
				a->mem_w[p] = sched__add(a->mem_w[p], c->embd_mem);
		}
		a->st_ns[i] = time - t0;
		if (i == 0)
			first = cur;
		prev = cur;
	}
	/* the head on the last unit, split among a group's members */
	bool emb[TP_MAX_PEERS] = {false};
	uint64_t hw[TP_MAX_PEERS] = {0};
	for (uint32_t j = 0; j < cur.k; j++)
		for (uint32_t i = 0; i < first.k; i++)
			emb[j] |= first.mem[i] == cur.mem[j];
	uint64_t ht = unit_head(c, &cur, emb, hw);
	time = sched__add(time, ht);
	a->st_ns[a->n_stages - 1] = sched__add(a->st_ns[a->n_stages - 1], ht);
	for (uint32_t j = 0; j < cur.k; j++)
		a->mem_w[cur.mem[j]] = sched__add(a->mem_w[cur.mem[j]], hw[j]);
	if (!c->has_prev)
		for (size_t p = 0; p < n; p++)
			moved += a->mem_w[p];
	else
		moved += c->m->embd_bytes + c->m->head_bytes + /* not tracked per member */
		         (c->mtp ? c->m->mtp_bytes : 0);
	for (size_t p = 0; p < n && a->feasible; p++)
		if (sched__add(a->mem_w[p], a->mem_kv[p]) > c->cap[p]) {
			a->feasible = false;
			a->bad_peer = (uint32_t)p;
		}
	a->time_ns = time;
	a->moved = moved;
}
