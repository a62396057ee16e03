/*
 * scheduler/plan.c: the policy's defaults, the plan object (building it from
 * an assignment, copying) and its canonical encoding and digest; the
 * accessors are plan_access.c's.
 *
 * Part: scheduler/ (pure). The encoding is specified in plan.h.
 */
#include "scheduler/sched_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

void shoal_policy_init(shoal_policy *p)
{
	memset(p, 0, sizeof *p);
	/* 8192 tokens: a long chat or a mid-sized document, the context most
	 * local front-ends default to; the KV for it is reserved up front. */
	p->ctx = 8192;
	p->sessions = 1;
	/* 5 %: allocator slack, the engine's scratch and activation buffers
	 * (tens of MB for a 128k-vocabulary logits row) and the OS's own
	 * growth; on a 16 GiB laptop that is 800 MiB. */
	p->headroom_permille = 50;
	/* 10 %: a re-plan pauses every session and reloads tensors (tens of
	 * seconds for 100 GB at a few GB/s); below 10 % faster decode the
	 * pause is not won back within the minutes a plan usually lives, and
	 * 10 % is above the noise the bucketed view still lets through. */
	p->gain_permille = 100;
	/* 2 %: within the error of the cost model itself, so plans closer
	 * than that are not meaningfully faster; then move the fewest bytes. */
	p->near_permille = 20;
}

/* ---- building ---------------------------------------------------------- */

/* Bytes of peer p on its GPU in a plan with tensor groups: a group's
 * member computes its share on a unified GPU (cost.c: tpbw, tpfl), so its
 * weights and KV are there (in the host's memory, up to the GPU's share of
 * it); everything else of such a plan runs on the CPUs. */
static uint64_t tp_gpu_bytes(const sched__ctx *c, const sched__asg *a, uint32_t p)
{
	if (!c->gcap[p] || !c->unified[p])
		return 0;
	bool member = false;
	for (uint32_t g = 0; g < a->tp->n_groups && !member; g++)
		for (uint32_t j = 0; j < a->tp->g_n[g]; j++)
			member |= a->tp->g_mem[(size_t)g * c->n + j] == p;
	uint64_t b = sched__add(a->mem_w[p], a->mem_kv[p]);
	return !member ? 0 : b < c->gcap[p] ? b : c->gcap[p];
}

shoal_err sched__plan_build(const sched__ctx *c, const sched__asg *a, uint64_t epoch,
                            shoal_plan **out)
{
	shoal_plan *p = calloc(1, sizeof *p);
	uint32_t *map = calloc(c->n, sizeof *map);
	uint8_t *used = calloc(c->n, 1);
	if (!p || !map || !used)
		goto nomem;
	p->epoch = epoch;
	p->n_layer = c->L;
	memcpy(p->model_id, c->m->model_id, sizeof p->model_id);
	p->model_bytes = c->m->embd_bytes + c->m->head_bytes;
	for (uint32_t l = 0; l < c->L; l++)
		p->model_bytes +=
		    c->m->layers[l].bytes + c->m->layers[l].expert_bytes * c->m->layers[l].n_expert;
	snprintf(p->name, sizeof p->name, "%s", c->m->name);
	for (uint32_t i = 0; i < a->n_stages; i++)
		used[a->st_peer[i]] = 1;
	for (uint32_t g = 0; a->tp && g < a->tp->n_groups; g++)
		for (uint32_t j = 0; j < a->tp->g_n[g]; j++)
			used[a->tp->g_mem[(size_t)g * c->n + j]] = 1;
	for (uint32_t s = 0; s < c->n_slots; s++)
		for (uint32_t k = 0; k < a->n_own[s]; k++)
			used[a->own[s * SHOAL_PLAN_MAX_OWNERS + k]] = 1;
	for (size_t i = 0; i < c->n; i++)
		if (used[i])
			map[i] = (uint32_t)p->n_peers++;
	p->peers = calloc(p->n_peers, sizeof *p->peers);
	p->stages = calloc(a->n_stages ? a->n_stages : 1, sizeof *p->stages);
	p->layer_n_expert = calloc(c->L, sizeof *p->layer_n_expert);
	p->layer_slot = calloc(c->L, sizeof *p->layer_slot);
	p->n_slots = c->n_slots;
	p->slot_n_owner = calloc(c->n_slots ? c->n_slots : 1, 1);
	p->slot_owner = calloc(c->n_slots ? (size_t)c->n_slots * SHOAL_PLAN_MAX_OWNERS : 1,
	                       sizeof *p->slot_owner);
	if (!p->peers || !p->stages || !p->layer_n_expert || !p->layer_slot || !p->slot_n_owner ||
	    !p->slot_owner)
		goto nomem;
	for (size_t i = 0; i < c->n; i++) {
		if (!used[i])
			continue;
		shoal_plan_peer *pp = &p->peers[map[i]];
		const shoal_view_peer *vp = shoal_view_peer_at(c->v, i);
		pp->id = vp->id;
		memcpy(pp->name, vp->name, sizeof pp->name);
		pp->weight_bytes = a->mem_w[i];
		pp->kv_bytes = a->mem_kv[i];
		pp->capacity_bytes = c->cap[i];
		pp->n_experts = a->n_exp[i];
		pp->gpu_bytes = a->tp ? tp_gpu_bytes(c, a, (uint32_t)i) : a->mem_g[i];
		pp->gpu_capacity = c->gcap[i];
		pp->gpu_unified = c->unified[i];
		memcpy(pp->gpu_backend, vp->gpu_backend, sizeof pp->gpu_backend);
	}
	p->n_stages = a->n_stages;
	for (uint32_t i = 0; i < a->n_stages; i++)
		p->stages[i] =
		    (shoal_plan_stage){map[a->st_peer[i]], a->st_first[i], a->st_end[i],
		                       a->tp ? a->st_first[i] : a->st_gend[i], a->st_ns[i]};
	p->head_gpu = !a->tp && a->head_gpu;
	p->embd_peer = map[a->st_peer[0]];
	p->head_peer = map[a->st_peer[a->n_stages - 1]];
	if (a->tp && a->tp->st_group[a->n_stages - 1] != UINT32_MAX)
		p->head_peer = map[sched__tp_lead(c, a->tp, a->tp->st_group[a->n_stages - 1])];
	for (uint32_t l = 0; l < c->L; l++) {
		p->layer_n_expert[l] = c->m->layers[l].n_expert;
		p->layer_slot[l] = c->slot0[l];
	}
	for (uint32_t s = 0; s < c->n_slots; s++) {
		uint32_t k = a->n_own[s], *o = p->slot_owner + (size_t)s * SHOAL_PLAN_MAX_OWNERS;
		p->slot_n_owner[s] = (uint8_t)k;
		for (uint32_t j = 0; j < k; j++)
			o[j] = map[a->own[s * SHOAL_PLAN_MAX_OWNERS + j]];
		for (uint32_t j = 1; j < k; j++) /* ascending: insertion sort */
			for (uint32_t q = j; q > 0 && o[q - 1] > o[q]; q--) {
				uint32_t t = o[q];
				o[q] = o[q - 1];
				o[q - 1] = t;
			}
	}
	if (a->tp && a->tp->n_groups) {
		const sched__tp *t = a->tp;
		size_t nm = 0;
		for (uint32_t g = 0; g < t->n_groups; g++)
			nm += t->g_n[g];
		p->n_groups = t->n_groups;
		p->grp_stage = calloc(t->n_groups, sizeof *p->grp_stage);
		p->grp_first = calloc(t->n_groups, sizeof *p->grp_first);
		p->grp_n = calloc(t->n_groups, sizeof *p->grp_n);
		p->grp_mem = calloc(nm, sizeof *p->grp_mem);
		if (!p->grp_stage || !p->grp_first || !p->grp_n || !p->grp_mem)
			goto nomem;
		/* groups in stage order; members keep view (= id) order, and
		 * map is monotonic, so they are ascending in the plan too */
		size_t gi = 0, mi = 0;
		for (uint32_t i = 0; i < a->n_stages; i++) {
			uint32_t g = t->st_group[i];
			if (g == UINT32_MAX)
				continue;
			p->grp_stage[gi] = i;
			p->grp_first[gi] = (uint32_t)mi;
			p->grp_n[gi] = t->g_n[g];
			for (uint32_t j = 0; j < t->g_n[g]; j++)
				p->grp_mem[mi++] =
				    (shoal_plan_member){map[t->g_mem[(size_t)g * c->n + j]],
				                        t->g_w[(size_t)g * c->n + j]};
			gi++;
		}
		p->n_groups = gi;
	}
	p->predicted_ns = a->time_ns;
	p->moved_bytes = a->moved;
	/* the head peer's MTP bytes; on a peer that also embeds, less the
	 * embedding it holds anyway */
	p->mtp = c->mtp;
	if (c->mtp)
		p->mtp_mem = a->n_stages && a->st_peer[0] == a->st_peer[a->n_stages - 1]
		                 ? c->mtp_first
		                 : c->mtp_mem;
	uint8_t *enc;
	size_t len;
	if (shoal_plan_encode(p, &enc, &len))
		goto nomem;
	shoal_digest(enc, len, p->digest);
	free(enc);
	free(map);
	free(used);
	*out = p;
	return SHOAL_OK;
nomem:
	free(map);
	free(used);
	shoal_plan_free(p);
	return SHOAL_ERR_NOMEM;
}

void shoal_plan_free(shoal_plan *p)
{
	if (!p)
		return;
	free(p->peers);
	free(p->stages);
	free(p->layer_n_expert);
	free(p->layer_slot);
	free(p->slot_n_owner);
	free(p->slot_owner);
	free(p->grp_stage);
	free(p->grp_first);
	free(p->grp_n);
	free(p->grp_mem);
	free(p);
}

static void *dup_bytes(const void *src, size_t n)
{
	void *d = malloc(n ? n : 1);
	if (d && n)
		memcpy(d, src, n);
	return d;
}

shoal_plan *shoal_plan_dup(const shoal_plan *s)
{
	shoal_plan *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	*p = *s;
	p->peers = dup_bytes(s->peers, s->n_peers * sizeof *s->peers);
	p->stages = dup_bytes(s->stages, s->n_stages * sizeof *s->stages);
	p->layer_n_expert = dup_bytes(s->layer_n_expert, s->n_layer * sizeof *s->layer_n_expert);
	p->layer_slot = dup_bytes(s->layer_slot, s->n_layer * sizeof *s->layer_slot);
	p->slot_n_owner = dup_bytes(s->slot_n_owner, s->n_slots);
	p->slot_owner = dup_bytes(s->slot_owner, (size_t)s->n_slots * SHOAL_PLAN_MAX_OWNERS *
	                                             sizeof *s->slot_owner);
	p->grp_stage = p->grp_first = p->grp_n = NULL;
	p->grp_mem = NULL;
	if (s->n_groups) {
		size_t nm = 0;
		for (size_t g = 0; g < s->n_groups; g++)
			nm += s->grp_n[g];
		p->grp_stage = dup_bytes(s->grp_stage, s->n_groups * sizeof *s->grp_stage);
		p->grp_first = dup_bytes(s->grp_first, s->n_groups * sizeof *s->grp_first);
		p->grp_n = dup_bytes(s->grp_n, s->n_groups * sizeof *s->grp_n);
		p->grp_mem = dup_bytes(s->grp_mem, nm * sizeof *s->grp_mem);
		if (!p->grp_stage || !p->grp_first || !p->grp_n || !p->grp_mem) {
			shoal_plan_free(p);
			return NULL;
		}
	}
	if (!p->peers || !p->stages || !p->layer_n_expert || !p->layer_slot || !p->slot_n_owner ||
	    !p->slot_owner) {
		shoal_plan_free(p);
		return NULL;
	}
	return p;
}

/* ---- canonical encoding ------------------------------------------------ */

/* Whether some stage computes on a GPU: the encoding's version 2. */
static bool plan_has_gpu(const shoal_plan *p)
{
	for (size_t i = 0; i < p->n_stages; i++)
		if (p->stages[i].gpu_end != p->stages[i].first_layer)
			return true;
	return p->head_gpu;
}

typedef struct enc {
	uint8_t *b;
	size_t len, cap;
	bool fail;
} enc;

static void put(enc *e, const void *src, size_t n)
{
	if (e->fail)
		return;
	if (e->len + n > e->cap) {
		size_t nc = e->cap ? e->cap : 256;
		while (nc < e->len + n)
			nc *= 2;
		uint8_t *nb = realloc(e->b, nc);
		if (!nb) {
			e->fail = true;
			return;
		}
		e->b = nb;
		e->cap = nc;
	}
	memcpy(e->b + e->len, src, n);
	e->len += n;
}

static void put_u32(enc *e, uint32_t x)
{
	uint8_t b[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
	put(e, b, 4);
}

static void put_u64(enc *e, uint64_t x)
{
	put_u32(e, (uint32_t)x);
	put_u32(e, (uint32_t)(x >> 32));
}

shoal_err shoal_plan_encode(const shoal_plan *p, uint8_t **out, size_t *len)
{
	enc e = {0};
	bool v2 = plan_has_gpu(p) || p->mtp; /* version 3 has version 2's sections */
	put(&e, "SHPL", 4);
	put_u32(&e, p->mtp ? 3 : v2 ? 2 : 1);
	put_u64(&e, p->epoch);
	put(&e, p->model_id, SHOAL_MANIFEST_MODEL_ID_BYTES);
	put_u64(&e, p->model_bytes);
	put_u32(&e, p->n_layer);
	put_u32(&e, (uint32_t)p->n_peers);
	for (size_t i = 0; i < p->n_peers; i++)
		put(&e, p->peers[i].id.b, SHOAL_PEER_ID_LEN);
	put_u32(&e, (uint32_t)p->n_stages);
	for (size_t i = 0; i < p->n_stages; i++) {
		put_u32(&e, p->stages[i].peer);
		put_u32(&e, p->stages[i].first_layer);
		put_u32(&e, p->stages[i].end_layer);
	}
	put_u32(&e, p->embd_peer);
	put_u32(&e, p->head_peer);
	uint32_t n_moe = 0;
	for (uint32_t l = 0; l < p->n_layer; l++)
		n_moe += p->layer_n_expert[l] != 0;
	put_u32(&e, n_moe);
	for (uint32_t l = 0; l < p->n_layer; l++) {
		if (!p->layer_n_expert[l])
			continue;
		put_u32(&e, l);
		put_u32(&e, p->layer_n_expert[l]);
		for (uint32_t x = 0; x < p->layer_n_expert[l]; x++) {
			uint32_t s = p->layer_slot[l] + x;
			put_u32(&e, p->slot_n_owner[s]);
			for (uint32_t k = 0; k < p->slot_n_owner[s]; k++)
				put_u32(&e, p->slot_owner[(size_t)s * SHOAL_PLAN_MAX_OWNERS + k]);
		}
	}
	if (p->n_groups || v2) {
		put_u32(&e, (uint32_t)p->n_groups);
		for (size_t g = 0; g < p->n_groups; g++) {
			put_u32(&e, p->grp_stage[g]);
			put_u32(&e, p->grp_n[g]);
			for (uint32_t j = 0; j < p->grp_n[g]; j++) {
				put_u32(&e, p->grp_mem[p->grp_first[g] + j].peer);
				put_u64(&e, p->grp_mem[p->grp_first[g] + j].weight);
			}
		}
	}
	if (v2) {
		for (size_t i = 0; i < p->n_stages; i++)
			put_u32(&e, p->stages[i].gpu_end);
		put_u32(&e, p->head_gpu);
	}
	if (p->mtp)
		put_u32(&e, 1);
	if (e.fail) {
		free(e.b);
		return SHOAL_ERR_NOMEM;
	}
	*out = e.b;
	*len = e.len;
	return SHOAL_OK;
}

/* ---- decoding ---------------------------------------------------------- */

typedef struct dec {
	const uint8_t *b;
	size_t len, at;
	bool bad;
} dec;

static const uint8_t *take(dec *d, size_t n)
{
	if (d->bad || d->len - d->at < n) {
		d->bad = true;
		return NULL;
	}
	const uint8_t *p = d->b + d->at;
	d->at += n;
	return p;
}

static uint32_t take_u32(dec *d)
{
	const uint8_t *p = take(d, 4);
	return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	               (uint32_t)p[3] << 24
	         : 0;
}

static uint64_t take_u64(dec *d)
{
	uint64_t lo = take_u32(d);
	return lo | (uint64_t)take_u32(d) << 32;
}

/* Bounds a decoded plan must keep (far above any real model or cluster). */
#define PLAN_MAX_LAYERS  4096u
#define PLAN_MAX_PEERS   1024u
#define PLAN_MAX_EXPERTS 4096u

/* The group section at d->at (counts already checked: n_mem members in
 * all): members ascending and below n_peer, weights > 0, and a group's
 * stage names one of its members. */
static shoal_err decode_groups(shoal_plan *p, dec *d, size_t at, size_t n_mem, const char **bad)
{
	p->grp_stage = calloc(p->n_groups, sizeof *p->grp_stage);
	p->grp_first = calloc(p->n_groups, sizeof *p->grp_first);
	p->grp_n = calloc(p->n_groups, sizeof *p->grp_n);
	p->grp_mem = calloc(n_mem, sizeof *p->grp_mem);
	if (!p->grp_stage || !p->grp_first || !p->grp_n || !p->grp_mem)
		return SHOAL_ERR_NOMEM;
	d->at = at + 4;
	uint32_t mi = 0;
	for (size_t g = 0; g < p->n_groups; g++) {
		p->grp_stage[g] = take_u32(d);
		p->grp_n[g] = take_u32(d);
		p->grp_first[g] = mi;
		bool has_stage_peer = false;
		for (uint32_t j = 0; j < p->grp_n[g]; j++, mi++) {
			shoal_plan_member *m = &p->grp_mem[mi];
			m->peer = take_u32(d);
			m->weight = take_u64(d);
			if (m->peer >= p->n_peers || !m->weight || (j && m->peer <= m[-1].peer)) {
				*bad = "tensor group members out of range or order";
				return SHOAL_ERR_FORMAT;
			}
			has_stage_peer |= m->peer == p->stages[p->grp_stage[g]].peer;
		}
		if (!has_stage_peer) {
			*bad = "a tensor group's stage peer is not a member";
			return SHOAL_ERR_FORMAT;
		}
	}
	return SHOAL_OK;
}

/* Version 2's device section at d->at: each stage's GPU end within its
 * layers, the head's device (on the GPU only where the last stage's
 * layers all are); a version-2 encoding without any GPU part is not
 * canonical (version 1 encodes that plan). */
static shoal_err decode_devices(shoal_plan *p, dec *d, uint32_t version, const char **bad)
{
	for (size_t i = 0; i < p->n_stages; i++) {
		shoal_plan_stage *st = &p->stages[i];
		st->gpu_end = take_u32(d);
		if (!d->bad && (st->gpu_end < st->first_layer || st->gpu_end > st->end_layer)) {
			*bad = "a stage's GPU layers out of its range";
			return SHOAL_ERR_FORMAT;
		}
	}
	uint32_t hg = take_u32(d);
	if (d->bad) {
		*bad = "truncated";
		return SHOAL_ERR_FORMAT;
	}
	const shoal_plan_stage *ls = &p->stages[p->n_stages - 1];
	if (hg > 1 || (hg && ls->gpu_end != ls->end_layer)) {
		*bad = "the head on a GPU that does not end the last stage";
		return SHOAL_ERR_FORMAT;
	}
	p->head_gpu = hg;
	if (version == 2 && !plan_has_gpu(p)) {
		*bad = "version 2 without a GPU part";
		return SHOAL_ERR_FORMAT;
	}
	return SHOAL_OK;
}

shoal_err shoal_plan_decode(const uint8_t *buf, size_t len, shoal_plan **out, char *why,
                            size_t why_len)
{
	SHOAL_ASSERT((buf || !len) && out);
	*out = NULL;
	shoal_err e;
	dec d = {.b = buf, .len = len};
	shoal_plan *p = calloc(1, sizeof *p);
	if (!p)
		return SHOAL_ERR_NOMEM;
	const char *bad = NULL;
	const uint8_t *m = take(&d, 4);
	uint32_t version = take_u32(&d);
	if (!m || memcmp(m, "SHPL", 4) || version < 1 || version > 3) {
		bad = "not a version-1, -2 or -3 plan encoding";
		goto fail;
	}
	p->epoch = take_u64(&d);
	const uint8_t *id = take(&d, SHOAL_MANIFEST_MODEL_ID_BYTES);
	if (id)
		memcpy(p->model_id, id, SHOAL_MANIFEST_MODEL_ID_BYTES);
	p->model_bytes = take_u64(&d);
	p->n_layer = take_u32(&d);
	p->n_peers = take_u32(&d);
	if (d.bad || !p->n_layer || p->n_layer > PLAN_MAX_LAYERS || !p->n_peers ||
	    p->n_peers > PLAN_MAX_PEERS) {
		bad = "layer or peer count out of range";
		goto fail;
	}
	p->peers = calloc(p->n_peers, sizeof *p->peers);
	p->layer_n_expert = calloc(p->n_layer, sizeof *p->layer_n_expert);
	p->layer_slot = calloc(p->n_layer, sizeof *p->layer_slot);
	if (!p->peers || !p->layer_n_expert || !p->layer_slot)
		goto nomem;
	for (size_t i = 0; i < p->n_peers; i++) {
		const uint8_t *pid = take(&d, SHOAL_PEER_ID_LEN);
		if (pid)
			memcpy(p->peers[i].id.b, pid, SHOAL_PEER_ID_LEN);
		if (i && pid && memcmp(p->peers[i - 1].id.b, pid, SHOAL_PEER_ID_LEN) >= 0) {
			bad = "peers not in strictly ascending id order";
			goto fail;
		}
	}
	p->n_stages = take_u32(&d);
	if (d.bad || !p->n_stages || p->n_stages > p->n_layer) {
		bad = "stage count out of range";
		goto fail;
	}
	p->stages = calloc(p->n_stages, sizeof *p->stages);
	if (!p->stages)
		goto nomem;
	uint32_t next_layer = 0;
	for (size_t i = 0; i < p->n_stages; i++) {
		shoal_plan_stage *st = &p->stages[i];
		st->peer = take_u32(&d);
		st->first_layer = take_u32(&d);
		st->end_layer = take_u32(&d);
		if (!d.bad && (st->peer >= p->n_peers || st->first_layer != next_layer ||
		               st->end_layer <= st->first_layer || st->end_layer > p->n_layer)) {
			bad = "stages do not cover the layers in order";
			goto fail;
		}
		next_layer = st->end_layer;
		st->gpu_end = st->first_layer; /* version 2 says otherwise below */
	}
	p->embd_peer = take_u32(&d);
	p->head_peer = take_u32(&d);
	uint32_t n_moe = take_u32(&d);
	if (d.bad || next_layer != p->n_layer || p->embd_peer >= p->n_peers ||
	    p->head_peer >= p->n_peers || n_moe > p->n_layer) {
		bad = "stages, embedding, head or MoE layer count out of range";
		goto fail;
	}
	/* MoE layers: counted first (slots are laid out by layer), then read */
	size_t at_moe = d.at;
	uint64_t slots = 0;
	int64_t last = -1;
	for (uint32_t k = 0; k < n_moe && !d.bad; k++) {
		uint32_t l = take_u32(&d), ne = take_u32(&d);
		if (d.bad || (int64_t)l <= last || l >= p->n_layer || !ne ||
		    ne > PLAN_MAX_EXPERTS) {
			bad = "MoE layers out of order or range";
			goto fail;
		}
		last = l;
		p->layer_n_expert[l] = ne;
		for (uint32_t x = 0; x < ne && !d.bad; x++) {
			uint32_t no = take_u32(&d);
			if (no > SHOAL_PLAN_MAX_OWNERS) {
				bad = "too many owners of an expert";
				goto fail;
			}
			take(&d, (size_t)no * 4);
		}
		slots += ne;
	}
	if (d.bad)
		goto truncated;
	/* tensor groups, when bytes remain: checked and counted here, read
	 * after the MoE layers below */
	size_t at_grp = d.at, n_mem = 0;
	if (d.at != d.len || version >= 2) {
		p->n_groups = take_u32(&d);
		if (d.bad || (!p->n_groups && version == 1) || p->n_groups > p->n_stages) {
			bad = "tensor group count out of range";
			goto fail;
		}
		int64_t last_st = -1;
		for (size_t g = 0; g < p->n_groups && !d.bad; g++) {
			uint32_t st = take_u32(&d), nm = take_u32(&d);
			if (d.bad)
				break;
			if ((int64_t)st <= last_st || st >= p->n_stages || nm < 2 ||
			    nm > p->n_peers) {
				bad = "tensor groups out of order or range";
				goto fail;
			}
			last_st = st;
			take(&d, (size_t)nm * 12);
			n_mem += nm;
		}
		if (d.bad)
			goto truncated;
	}
	if (version >= 2 && (e = decode_devices(p, &d, version, &bad)) != SHOAL_OK)
		goto out;
	if (version == 3 && take_u32(&d) != 1) {
		bad = d.bad ? "truncated" : "version 3 without the MTP layer's 1";
		goto fail;
	}
	p->mtp = version == 3;
	if (d.at != d.len) {
		bad = "bytes after the plan";
		goto fail;
	}
	p->n_slots = (uint32_t)slots;
	p->slot_n_owner = calloc(slots ? slots : 1, 1);
	p->slot_owner = calloc(slots ? slots * SHOAL_PLAN_MAX_OWNERS : 1, sizeof *p->slot_owner);
	if (!p->slot_n_owner || !p->slot_owner)
		goto nomem;
	uint32_t slot = 0;
	for (uint32_t l = 0; l < p->n_layer; l++) {
		p->layer_slot[l] = slot;
		slot += p->layer_n_expert[l];
	}
	d.at = at_moe;
	for (uint32_t k = 0; k < n_moe; k++) {
		uint32_t l = take_u32(&d), ne = take_u32(&d);
		for (uint32_t x = 0; x < ne; x++) {
			uint32_t s0 = p->layer_slot[l] + x, no = take_u32(&d);
			uint32_t *o = p->slot_owner + (size_t)s0 * SHOAL_PLAN_MAX_OWNERS;
			p->slot_n_owner[s0] = (uint8_t)no;
			for (uint32_t j = 0; j < no; j++) {
				o[j] = take_u32(&d);
				if (o[j] >= p->n_peers || (j && o[j] <= o[j - 1])) {
					bad = "expert owners out of range or order";
					goto fail;
				}
			}
		}
	}
	if (p->n_groups && (e = decode_groups(p, &d, at_grp, n_mem, &bad)) != SHOAL_OK)
		goto out;
	shoal_digest(buf, len, p->digest);
	*out = p;
	return SHOAL_OK;
out:
	if (e == SHOAL_ERR_NOMEM)
		goto nomem;
	goto fail;
truncated:
	bad = "truncated";
fail:
	shoal_plan_free(p);
	return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "plan encoding: %s",
	                 bad ? bad : "truncated");
nomem:
	shoal_plan_free(p);
	return SHOAL_ERR_NOMEM;
}
