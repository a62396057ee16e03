/*
 * scheduler/plan_access.c: the plan object's accessors (scheduler/plan.h)
 * and shoal_plan_split, the apportioning every peer computes alike.
 *
 * Part: scheduler/ (pure). Calls nothing in the part: plan.c and the
 * search's files read the fields of sched_impl.h's struct shoal_plan.
 */
#include "scheduler/sched_impl.h"

#include <string.h>

#include "base/assert.h"

/* ---- accessors --------------------------------------------------------- */

uint64_t shoal_plan_epoch(const shoal_plan *p)
{
	return p->epoch;
}
const uint8_t *shoal_plan_model_id(const shoal_plan *p)
{
	return p->model_id;
}

const uint8_t *shoal_plan_digest(const shoal_plan *p)
{
	return p->digest;
}
uint64_t shoal_plan_predicted_ns(const shoal_plan *p)
{
	return p->predicted_ns;
}
bool shoal_plan_take_times(shoal_plan *p, const shoal_plan *from)
{
	if (memcmp(p->digest, from->digest, sizeof p->digest) || p->n_stages != from->n_stages)
		return false;
	bool changed = p->predicted_ns != from->predicted_ns;
	p->predicted_ns = from->predicted_ns;
	for (size_t i = 0; i < p->n_stages; i++) {
		changed |= p->stages[i].predicted_ns != from->stages[i].predicted_ns;
		p->stages[i].predicted_ns = from->stages[i].predicted_ns;
	}
	return changed;
}
uint64_t shoal_plan_moved_bytes(const shoal_plan *p)
{
	return p->moved_bytes;
}
bool shoal_plan_kept(const shoal_plan *p)
{
	return p->kept;
}
const char *shoal_plan_name(const shoal_plan *p)
{
	return p->name;
}
uint32_t shoal_plan_n_layer(const shoal_plan *p)
{
	return p->n_layer;
}
size_t shoal_plan_n_peers(const shoal_plan *p)
{
	return p->n_peers;
}
size_t shoal_plan_n_stages(const shoal_plan *p)
{
	return p->n_stages;
}
uint32_t shoal_plan_embd_peer(const shoal_plan *p)
{
	return p->embd_peer;
}
uint32_t shoal_plan_head_peer(const shoal_plan *p)
{
	return p->head_peer;
}
bool shoal_plan_head_gpu(const shoal_plan *p)
{
	return p->head_gpu;
}

bool shoal_plan_mtp(const shoal_plan *p)
{
	return p->mtp;
}

uint64_t shoal_plan_mtp_bytes(const shoal_plan *p)
{
	return p->mtp_mem;
}

const shoal_plan_peer *shoal_plan_peer_at(const shoal_plan *p, size_t i)
{
	SHOAL_ASSERT(i < p->n_peers);
	return &p->peers[i];
}

const shoal_plan_stage *shoal_plan_stage_at(const shoal_plan *p, size_t i)
{
	SHOAL_ASSERT(i < p->n_stages);
	return &p->stages[i];
}

uint32_t shoal_plan_layer_n_expert(const shoal_plan *p, uint32_t layer)
{
	return layer < p->n_layer ? p->layer_n_expert[layer] : 0;
}

size_t shoal_plan_expert_owners(const shoal_plan *p, uint32_t layer, uint32_t expert,
                                uint32_t owners[SHOAL_PLAN_MAX_OWNERS])
{
	if (layer >= p->n_layer || expert >= p->layer_n_expert[layer])
		return 0;
	uint32_t s = p->layer_slot[layer] + expert;
	for (uint32_t k = 0; k < p->slot_n_owner[s]; k++)
		owners[k] = p->slot_owner[(size_t)s * SHOAL_PLAN_MAX_OWNERS + k];
	return p->slot_n_owner[s];
}

size_t shoal_plan_n_groups(const shoal_plan *p)
{
	return p->n_groups;
}

size_t shoal_plan_stage_members(const shoal_plan *p, size_t stage, shoal_plan_member *out,
                                size_t max)
{
	SHOAL_ASSERT(stage < p->n_stages && (out || !max));
	for (size_t g = 0; g < p->n_groups; g++) {
		if (p->grp_stage[g] != stage)
			continue;
		for (size_t j = 0; j < p->grp_n[g] && j < max; j++)
			out[j] = p->grp_mem[p->grp_first[g] + j];
		return p->grp_n[g];
	}
	return 0;
}

void shoal_plan_split(const uint64_t *w, uint32_t n, uint32_t units, uint32_t *first,
                      uint32_t *count)
{
	SHOAL_ASSERT(n >= 1);
	unsigned __int128 tot = 0;
	for (uint32_t i = 0; i < n; i++)
		tot += w[i];
	SHOAL_ASSERT(tot > 0);
	uint32_t given = 0;
	for (uint32_t i = 0; i < n; i++) {
		count[i] = (uint32_t)((unsigned __int128)units * w[i] / tot);
		given += count[i];
	}
	/* the rest, one each, to the largest remainders (ties: lower i);
	 * fewer than n are left, and first[] marks who got one already */
	for (uint32_t i = 0; i < n; i++)
		first[i] = 0;
	for (; given < units; given++) {
		uint32_t best = UINT32_MAX;
		unsigned __int128 br = 0;
		for (uint32_t i = 0; i < n; i++) {
			unsigned __int128 r = (unsigned __int128)units * w[i] % tot;
			if (!first[i] && (best == UINT32_MAX || r > br)) {
				best = i;
				br = r;
			}
		}
		first[best] = 1;
		count[best]++;
	}
	uint32_t at = 0;
	for (uint32_t i = 0; i < n; i++) {
		first[i] = at;
		at += count[i];
	}
}
