/*
 * scheduler/view.c: the cluster view (peers in id order, links keyed by id
 * pairs, routing counts keyed by (layer, expert)) and the bucketing with
 * hysteresis.
 *
 * Part: scheduler/ (pure). Divisions: the view, buckets.
 */
#include "scheduler/view.h"

#include <stdlib.h>
#include <string.h>

#include "base/assert.h"

/* Bounds on what a view may name, so that a bad gossip message cannot make
 * us allocate without limit: the largest published MoE has 384 experts per
 * layer and 128 layers; 65536 of either leaves a wide margin. */
#define SHOAL_VIEW_MAX_INDEX 65536u

/* ---- the view ---------------------------------------------------------- */

typedef struct view_link {
	shoal_peer_id a, b; /* a < b */
	uint64_t latency_ns, bw;
} view_link;

struct shoal_view {
	shoal_view_peer *peers; /* (n_peers) sorted by id */
	size_t n_peers, cap_peers;
	view_link *links; /* (n_links) sorted by (a, b) */
	size_t n_links, cap_links;
	uint64_t def_latency_ns, def_bw;
	uint64_t **counts; /* (n_count_layers)(n_counts[l]) */
	uint8_t **known;   /* same shape: 1 if set */
	uint32_t *n_counts;
	uint32_t n_count_layers;
};

shoal_view *shoal_view_new(uint64_t default_latency_ns, uint64_t default_bw)
{
	shoal_view *v = calloc(1, sizeof *v);
	if (!v)
		return NULL;
	v->def_latency_ns = default_latency_ns;
	v->def_bw = default_bw ? default_bw : 1;
	return v;
}

void shoal_view_free(shoal_view *v)
{
	if (!v)
		return;
	for (uint32_t l = 0; l < v->n_count_layers; l++) {
		free(v->counts[l]);
		free(v->known[l]);
	}
	free(v->counts);
	free(v->known);
	free(v->n_counts);
	free(v->peers);
	free(v->links);
	free(v);
}

/* Index where id is or would be inserted; *found says which. */
static size_t peer_lower_bound(const shoal_view *v, const shoal_peer_id *id, bool *found)
{
	size_t lo = 0, hi = v->n_peers;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (shoal_peer_id_cmp(&v->peers[mid].id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < v->n_peers && !shoal_peer_id_cmp(&v->peers[lo].id, id);
	return lo;
}

shoal_err shoal_view_add_peer(shoal_view *v, const shoal_view_peer *p, char *why, size_t why_len)
{
	char hex[2 * SHOAL_PEER_ID_LEN + 1];
	shoal_peer_id_to_hex(&p->id, hex);
	if (!p->mem_bw || !p->flops)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "peer %s: bandwidth and compute must be positive", hex);
	if (p->gpu_mem && (!p->gpu_bw || !p->gpu_flops))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "peer %s: its GPU's bandwidth and compute must be positive", hex);
	if (p->load_pct > 90)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "peer %s: load %u%% over 90%%", hex,
		                 p->load_pct);
	if (p->bw_eff_pm > 1000 || p->fl_eff_pm > 1000 || p->gpu_bw_eff_pm > 1000 ||
	    p->gpu_fl_eff_pm > 1000)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "peer %s: an efficiency over 1 (1000 permille)", hex);
	if (p->hop_ns > (1ULL << 40) || p->round_ns > (1ULL << 40))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "peer %s: a hop or round cost over 2^40 ns", hex);
	bool found;
	size_t at = peer_lower_bound(v, &p->id, &found);
	if (found)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "peer %s listed twice", hex);
	if (v->n_peers == v->cap_peers) {
		size_t nc = v->cap_peers ? 2 * v->cap_peers : 8;
		shoal_view_peer *np = realloc(v->peers, nc * sizeof *np);
		if (!np)
			return SHOAL_ERR_NOMEM;
		v->peers = np;
		v->cap_peers = nc;
	}
	memmove(&v->peers[at + 1], &v->peers[at], (v->n_peers - at) * sizeof *v->peers);
	v->peers[at] = *p;
	v->peers[at].name[sizeof p->name - 1] = 0;
	v->peers[at].gpu_backend[sizeof p->gpu_backend - 1] = 0;
	v->peers[at].gpu_name[sizeof p->gpu_name - 1] = 0;
	v->n_peers++;
	return SHOAL_OK;
}

shoal_err shoal_view_remove_peer(shoal_view *v, const shoal_peer_id *id)
{
	bool found;
	size_t at = peer_lower_bound(v, id, &found);
	if (!found)
		return SHOAL_ERR_NOTFOUND;
	memmove(&v->peers[at], &v->peers[at + 1], (v->n_peers - at - 1) * sizeof *v->peers);
	v->n_peers--;
	size_t w = 0;
	for (size_t i = 0; i < v->n_links; i++)
		if (shoal_peer_id_cmp(&v->links[i].a, id) && shoal_peer_id_cmp(&v->links[i].b, id))
			v->links[w++] = v->links[i];
	v->n_links = w;
	return SHOAL_OK;
}

static int link_cmp(const view_link *l, const shoal_peer_id *a, const shoal_peer_id *b)
{
	int c = shoal_peer_id_cmp(&l->a, a);
	return c ? c : shoal_peer_id_cmp(&l->b, b);
}

static size_t link_lower_bound(const shoal_view *v, const shoal_peer_id *a, const shoal_peer_id *b,
                               bool *found)
{
	size_t lo = 0, hi = v->n_links;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (link_cmp(&v->links[mid], a, b) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < v->n_links && !link_cmp(&v->links[lo], a, b);
	return lo;
}

shoal_err shoal_view_set_link(shoal_view *v, const shoal_peer_id *a, const shoal_peer_id *b,
                              uint64_t latency_ns, uint64_t bw, char *why, size_t why_len)
{
	int c = shoal_peer_id_cmp(a, b);
	if (!c)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "a link from a peer to itself");
	if (!bw)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "a link with zero bandwidth");
	if (c > 0) {
		const shoal_peer_id *t = a;
		a = b;
		b = t;
	}
	bool found;
	size_t at = link_lower_bound(v, a, b, &found);
	if (found) {
		view_link *l = &v->links[at];
		if (latency_ns > l->latency_ns)
			l->latency_ns = latency_ns;
		if (bw < l->bw)
			l->bw = bw;
		return SHOAL_OK;
	}
	if (v->n_links == v->cap_links) {
		size_t nc = v->cap_links ? 2 * v->cap_links : 16;
		view_link *nl = realloc(v->links, nc * sizeof *nl);
		if (!nl)
			return SHOAL_ERR_NOMEM;
		v->links = nl;
		v->cap_links = nc;
	}
	memmove(&v->links[at + 1], &v->links[at], (v->n_links - at) * sizeof *v->links);
	v->links[at] = (view_link){*a, *b, latency_ns, bw};
	v->n_links++;
	return SHOAL_OK;
}

shoal_err shoal_view_set_expert_count(shoal_view *v, uint32_t layer, uint32_t expert,
                                      uint64_t count)
{
	if (layer >= SHOAL_VIEW_MAX_INDEX || expert >= SHOAL_VIEW_MAX_INDEX)
		return SHOAL_ERR_RANGE;
	if (layer >= v->n_count_layers) {
		uint32_t nl = layer + 1;
		uint64_t **c = realloc(v->counts, nl * sizeof *c);
		if (!c)
			return SHOAL_ERR_NOMEM;
		v->counts = c;
		uint8_t **k = realloc(v->known, nl * sizeof *k);
		if (!k)
			return SHOAL_ERR_NOMEM;
		v->known = k;
		uint32_t *n = realloc(v->n_counts, nl * sizeof *n);
		if (!n)
			return SHOAL_ERR_NOMEM;
		v->n_counts = n;
		for (uint32_t l = v->n_count_layers; l < nl; l++) {
			v->counts[l] = NULL;
			v->known[l] = NULL;
			v->n_counts[l] = 0;
		}
		v->n_count_layers = nl;
	}
	if (expert >= v->n_counts[layer]) {
		uint32_t ne = expert + 1, old = v->n_counts[layer];
		uint64_t *c = realloc(v->counts[layer], ne * sizeof *c);
		if (!c)
			return SHOAL_ERR_NOMEM;
		v->counts[layer] = c;
		uint8_t *k = realloc(v->known[layer], ne);
		if (!k)
			return SHOAL_ERR_NOMEM;
		v->known[layer] = k;
		memset(c + old, 0, (ne - old) * sizeof *c);
		memset(k + old, 0, ne - old);
		v->n_counts[layer] = ne;
	}
	v->counts[layer][expert] = count;
	v->known[layer][expert] = 1;
	return SHOAL_OK;
}

size_t shoal_view_n_peers(const shoal_view *v)
{
	return v->n_peers;
}

const shoal_view_peer *shoal_view_peer_at(const shoal_view *v, size_t i)
{
	SHOAL_ASSERT(i < v->n_peers);
	return &v->peers[i];
}

long shoal_view_find(const shoal_view *v, const shoal_peer_id *id)
{
	bool found;
	size_t at = peer_lower_bound(v, id, &found);
	return found ? (long)at : -1;
}

void shoal_view_link(const shoal_view *v, size_t i, size_t j, uint64_t *latency_ns, uint64_t *bw)
{
	SHOAL_ASSERT(i < v->n_peers && j < v->n_peers && i != j);
	*latency_ns = v->def_latency_ns;
	*bw = v->def_bw;
	const shoal_peer_id *a = &v->peers[i < j ? i : j].id, *b = &v->peers[i < j ? j : i].id;
	bool found;
	size_t at = link_lower_bound(v, a, b, &found);
	if (found) {
		*latency_ns = v->links[at].latency_ns;
		*bw = v->links[at].bw;
	}
}

size_t shoal_view_n_links(const shoal_view *v)
{
	return v->n_links;
}

void shoal_view_link_at(const shoal_view *v, size_t i, shoal_peer_id *a, shoal_peer_id *b,
                        uint64_t *latency_ns, uint64_t *bw)
{
	SHOAL_ASSERT(i < v->n_links);
	const view_link *l = &v->links[i];
	*a = l->a;
	*b = l->b;
	*latency_ns = l->latency_ns;
	*bw = l->bw;
}

void shoal_view_default_link(const shoal_view *v, uint64_t *latency_ns, uint64_t *bw)
{
	*latency_ns = v->def_latency_ns;
	*bw = v->def_bw;
}

uint32_t shoal_view_count_layers(const shoal_view *v)
{
	return v->n_count_layers;
}

uint32_t shoal_view_layer_n_counts(const shoal_view *v, uint32_t layer)
{
	return layer < v->n_count_layers ? v->n_counts[layer] : 0;
}

uint64_t shoal_view_expert_count(const shoal_view *v, uint32_t layer, uint32_t expert, bool *known)
{
	if (layer < v->n_count_layers && expert < v->n_counts[layer] && v->known[layer][expert]) {
		*known = true;
		return v->counts[layer][expert];
	}
	*known = false;
	return 0;
}

bool shoal_view_layer_has_counts(const shoal_view *v, uint32_t layer)
{
	if (layer >= v->n_count_layers)
		return false;
	for (uint32_t e = 0; e < v->n_counts[layer]; e++)
		if (v->known[layer][e])
			return true;
	return false;
}

/* ---- buckets ----------------------------------------------------------- */

/* 2^(i/4) for i = 0..3 in 16.16 fixed point (rounded down): 65536,
 * 65536*2^0.25 = 77935.9, *2^0.5 = 92681.9, *2^0.75 = 110217.8. */
static const uint64_t geo_frac[4] = {65536, 77935, 92681, 110217};

uint64_t shoal_bucket_geo_value(uint32_t k)
{
	uint32_t oct = k >> 2;
	if (oct >= 64)
		return UINT64_MAX;
	/* (frac << oct) >> 16 without overflow: frac < 2^17. */
	unsigned __int128 x = (unsigned __int128)geo_frac[k & 3] << oct;
	x >>= 16;
	return x > UINT64_MAX ? UINT64_MAX : (uint64_t)x;
}

static uint32_t geo_plain(uint64_t raw)
{
	if (raw <= 1)
		return 0;
	uint32_t k = 0;
	while (k < 255 && shoal_bucket_geo_value(k + 1) <= raw)
		k++;
	return k;
}

uint32_t shoal_bucket_geo(uint64_t raw, uint32_t prev)
{
	uint32_t k = geo_plain(raw);
	if (prev == SHOAL_BUCKET_NONE || prev > 255 || k == prev)
		return k;
	/* Bucket prev covers [value(prev), value(prev+1)); widen by half a
	 * step each side before leaving it. */
	uint64_t lo = shoal_bucket_geo_value(prev), hi = shoal_bucket_geo_value(prev + 1);
	uint64_t lo_m = prev ? lo - (lo - shoal_bucket_geo_value(prev - 1)) / 2 : 0;
	uint64_t hi_m = hi + (shoal_bucket_geo_value(prev + 2) - hi) / 2;
	if (raw >= lo_m && raw < hi_m)
		return prev;
	return k;
}

uint32_t shoal_bucket_load(uint32_t raw_pct, uint32_t prev_pct)
{
	uint32_t r = raw_pct > 90 ? 90 : raw_pct;
	uint32_t k = r / 10 * 10;
	if (prev_pct == SHOAL_BUCKET_NONE || prev_pct > 90 || prev_pct % 10)
		return k;
	/* prev covers [prev, prev + 10); keep it within 5 points outside. */
	if (raw_pct + 5 >= prev_pct && raw_pct < prev_pct + 15)
		return prev_pct;
	return k;
}
