/*
 * runtime/node/plan_json.c: plan -> JSON (the object in plan_json.h);
 * cluster_json.c reads and writes cluster descriptions.
 *
 * Part: runtime/ (glue).
 */
#include "runtime/node/plan_json.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the plan object --------------------------------------------------- */

static json_t *peer_ref(const shoal_plan *p, uint32_t i)
{
	const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
	char hex[SHOAL_PEER_ID_HEX_LEN];
	shoal_peer_id_to_hex(&pp->id, hex);
	return json_pack("{s:s, s:s}", "peer", hex, "name", pp->name);
}

static int add(json_t *o, const char *key, json_t *v)
{
	return v ? json_object_set_new(o, key, v) : -1;
}

/* A group's members, [{peer, name, weight, share}] (NULL when out of
 * memory). */
static json_t *members_json(const shoal_plan *p, const shoal_plan_member *mem, size_t nm)
{
	json_t *ms = json_array();
	uint64_t tot = 0;
	for (size_t j = 0; j < nm; j++)
		tot += mem[j].weight;
	for (size_t j = 0; ms && j < nm; j++) {
		json_t *mj = peer_ref(p, mem[j].peer);
		if (!mj || add(mj, "weight", json_integer((json_int_t)mem[j].weight)) ||
		    add(mj, "share", json_real((double)mem[j].weight / (double)tot))) {
			json_decref(mj);
			json_decref(ms);
			return NULL;
		}
		if (json_array_append_new(ms, mj)) {
			json_decref(ms);
			return NULL;
		}
	}
	return ms;
}

/* One layer range on one device: {device, backend, first_layer,
 * end_layer}. */
static json_t *range_json(bool gpu, const char *backend, uint32_t a, uint32_t b)
{
	return json_pack("{s:s, s:s, s:i, s:i}", "device", gpu ? "gpu" : "cpu", "backend", backend,
	                 "first_layer", (int)a, "end_layer", (int)b);
}

/* A stage's layer ranges by device: the GPU's first, then the CPU's (one
 * range when the stage is all on one). NULL when out of memory. */
static json_t *ranges_json(const shoal_plan *p, const shoal_plan_stage *s)
{
	const shoal_plan_peer *pp = shoal_plan_peer_at(p, s->peer);
	json_t *a = json_array();
	if (a && s->gpu_end > s->first_layer &&
	    json_array_append_new(a, range_json(true, pp->gpu_backend[0] ? pp->gpu_backend : "gpu",
	                                        s->first_layer, s->gpu_end))) {
		json_decref(a);
		return NULL;
	}
	if (a && s->gpu_end < s->end_layer &&
	    json_array_append_new(a, range_json(false, "cpu", s->gpu_end, s->end_layer))) {
		json_decref(a);
		return NULL;
	}
	return a;
}

json_t *shoal_plan_to_json(const shoal_plan *p)
{
	json_t *o = json_object(), *stages = json_array(), *experts = json_array(),
	       *memory = json_array();
	int bad = !o || !stages || !experts || !memory;
	char dh[65];
	shoal_digest_hex(shoal_plan_digest(p), dh);
	uint64_t ns = shoal_plan_predicted_ns(p);
	if (!bad) {
		bad |= add(o, "model", json_string(shoal_plan_name(p)));
		bad |= add(o, "epoch", json_integer((json_int_t)shoal_plan_epoch(p)));
		bad |= add(o, "digest", json_string(dh));
		bad |= add(o, "kept", json_boolean(shoal_plan_kept(p)));
		bad |= add(o, "predicted_ns_per_token", json_integer((json_int_t)ns));
		bad |= add(o, "predicted_ms_per_token", json_real((double)ns / 1e6));
		bad |= add(o, "tokens_per_second", json_real(ns ? 1e9 / (double)ns : 0));
		bad |= add(o, "moved_bytes", json_integer((json_int_t)shoal_plan_moved_bytes(p)));
	}
	for (size_t i = 0; !bad && i < shoal_plan_n_stages(p); i++) {
		const shoal_plan_stage *s = shoal_plan_stage_at(p, i);
		json_t *st = peer_ref(p, s->peer);
		bad |= !st || add(st, "first_layer", json_integer(s->first_layer)) ||
		       add(st, "end_layer", json_integer(s->end_layer));
		bad |= bad || add(st, "devices", ranges_json(p, s));
		/* a tensor group: its members (the stage's peer is the first,
		 * the entry) and their shares of every split dimension */
		shoal_plan_member mem[64];
		size_t nm = bad ? 0 : shoal_plan_stage_members(p, i, mem, 64);
		if (nm > 64)
			bad = 1;
		if (nm && !bad)
			bad |= add(st, "members", members_json(p, mem, nm));
		bad |= bad || json_array_append_new(stages, st);
	}
	if (!bad) {
		bad |= add(o, "embedding", peer_ref(p, shoal_plan_embd_peer(p)));
		json_t *h = peer_ref(p, shoal_plan_head_peer(p));
		bad |= add(o, "head", h);
		bad |= bad || add(h, "device", json_string(shoal_plan_head_gpu(p) ? "gpu" : "cpu"));
		/* DeepSeek's MTP layer beside the head, and the bytes counted
		 * (not known of a plan read back from its encoding) */
		if (shoal_plan_mtp(p))
			bad |= bad || add(h, "mtp", json_true());
		if (shoal_plan_mtp_bytes(p))
			bad |= bad || add(h, "mtp_bytes",
			                  json_integer((json_int_t)shoal_plan_mtp_bytes(p)));
		/* a group in the last stage splits the head by vocab rows, with
		 * the stage's shares; the head peer gathers the logits */
		shoal_plan_member mem[64];
		size_t ls = shoal_plan_n_stages(p) - 1;
		size_t nm = bad ? 0 : shoal_plan_stage_members(p, ls, mem, 64);
		if (nm > 64)
			bad = 1;
		if (nm && !bad)
			bad |= add(h, "members", members_json(p, mem, nm));
	}
	size_t np = shoal_plan_n_peers(p);
	json_t **lists = calloc(np ? np : 1, sizeof *lists);
	bad |= !lists;
	for (uint32_t l = 0; !bad && l < shoal_plan_n_layer(p); l++) {
		uint32_t ne = shoal_plan_layer_n_expert(p, l);
		if (!ne)
			continue;
		for (size_t i = 0; i < np; i++)
			lists[i] = NULL;
		for (uint32_t e = 0; !bad && e < ne; e++) {
			uint32_t own[SHOAL_PLAN_MAX_OWNERS];
			size_t k = shoal_plan_expert_owners(p, l, e, own);
			for (size_t j = 0; !bad && j < k; j++) {
				if (!lists[own[j]])
					bad |= !(lists[own[j]] = json_array());
				bad |= bad || json_array_append_new(lists[own[j]], json_integer(e));
			}
		}
		json_t *owners = json_array(), *layer = json_object();
		bad |= !owners || !layer;
		for (size_t i = 0; i < np; i++) {
			if (!lists[i])
				continue;
			json_t *r = bad ? NULL : peer_ref(p, (uint32_t)i);
			if (!r || add(r, "experts", lists[i]) || json_array_append_new(owners, r)) {
				bad = 1;
				if (!r)
					json_decref(lists[i]);
			}
		}
		if (bad) {
			json_decref(owners);
			json_decref(layer);
			break;
		}
		bad |= add(layer, "layer", json_integer(l)) || add(layer, "owners", owners) ||
		       json_array_append_new(experts, layer);
	}
	free(lists);
	for (size_t i = 0; !bad && i < np; i++) {
		const shoal_plan_peer *pp = shoal_plan_peer_at(p, i);
		json_t *r = peer_ref(p, (uint32_t)i);
		bad |= !r || add(r, "weights_bytes", json_integer((json_int_t)pp->weight_bytes)) ||
		       add(r, "kv_bytes", json_integer((json_int_t)pp->kv_bytes)) ||
		       add(r, "used_bytes",
		           json_integer((json_int_t)(pp->weight_bytes + pp->kv_bytes))) ||
		       add(r, "capacity_bytes", json_integer((json_int_t)pp->capacity_bytes)) ||
		       add(r, "experts", json_integer(pp->n_experts)) ||
		       add(r, "gpu_bytes", json_integer((json_int_t)pp->gpu_bytes)) ||
		       add(r, "gpu_capacity_bytes", json_integer((json_int_t)pp->gpu_capacity)) ||
		       json_array_append_new(memory, r);
	}
	if (!bad) {
		bad |= json_object_set(o, "stages", stages) ||
		       json_object_set(o, "experts", experts) ||
		       json_object_set(o, "memory", memory);
	}
	json_decref(stages);
	json_decref(experts);
	json_decref(memory);
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}
